"""Throughput and memory of draining a Kafka backlog with sluice's byte bound
(spark.sluice.input.buffer.max.bytes) vs no bound vs maxOffsetsPerTrigger tuned to the same
average batch size, on a real local Kafka broker (tests/kafka_harness.py), in one run.

    .venv/bin/python bench/input/bench_input.py [--records 1500] [--bound 8m] [--reps 2]

Each query drains the whole backlog from the earliest offsets with a fresh checkpoint; its
foreachBatch shuffles and sorts the batch (so the whole batch is held at once, as a sorting or
stateful consumer would); "max batch" is the largest batch's key+value bytes. Throughput = key+value bytes / wall time to drain. Peak memory
= the peak JVM heap use (sum over heap pools, peaks reset after a GC before each run) of the
local-mode driver/executor JVM, minus the heap in use after that GC; it depends on GC timing more
than on the batch (the Kafka reader streams records), so it is printed, not claimed. Each session drains a small warm-up topic first. Runs alternate
between variants; the best of `reps` is reported.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from pyspark.sql import DataFrame, SparkSession, functions as F  # noqa: E402

import kafka_harness as kh  # noqa: E402
from conftest import BASE_CONF, fresh_builder, stop_session  # noqa: E402
import sluice  # noqa: E402


def session(jars: list[str], bounded: str | None) -> SparkSession:
    stop_session()
    b = fresh_builder().master("local[2]").appName("sluice-bench-input")
    conf = {**BASE_CONF, "spark.driver.memory": "2g", "spark.jars": ",".join(jars)}
    for k, v in conf.items():
        b = b.config(k, v)
    if bounded is not None:
        b = sluice.configure(b, input_buffer_max_bytes=bounded)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def warmed(spark: SparkSession, broker: kh.Broker) -> SparkSession:
    """Drains a small topic once so that each measured run starts on a warm JVM and session."""
    drain(spark, broker, "warmup")
    return spark


def heap_reset(spark: SparkSession) -> int:
    """GC, reset the heap pools' peaks; returns the heap in use after the GC (the baseline)."""
    jvm = spark._jvm
    jvm.java.lang.System.gc()
    for pool in jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans():
        if str(pool.getType()) == "Heap memory":
            pool.resetPeakUsage()
    return int(jvm.java.lang.management.ManagementFactory.getMemoryMXBean().getHeapMemoryUsage().getUsed())


def heap_peak(spark: SparkSession) -> int:
    jvm = spark._jvm
    return sum(p.getPeakUsage().getUsed() for p in jvm.java.lang.management.ManagementFactory
               .getMemoryPoolMXBeans() if str(p.getType()) == "Heap memory")


def drain(spark: SparkSession, broker: kh.Broker, topic: str, **options: object) -> dict:
    batches: list[int] = []

    def sink(df: DataFrame, _: int) -> None:
        # A consumer that holds its batch: shuffle and sort it (the sort buffers hold the batch).
        r = (df.repartition(2).sortWithinPartitions("value")
             .select(F.sum(F.length("key") + F.length("value")).alias("b"))).first()
        batches.append(int(r.b or 0))

    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for k, v in options.items():
        reader = reader.option(k, str(v))
    baseline = heap_reset(spark)
    t0 = time.monotonic()
    q = (reader.load().writeStream.foreachBatch(sink)
         .option("checkpointLocation", tempfile.mkdtemp(prefix="sluice-bench-")).start())
    q.processAllAvailable()
    seconds = time.monotonic() - t0
    rows = sum(p["numInputRows"] for p in q.recentProgress)
    q.stop()
    return {"seconds": seconds, "bytes": sum(batches), "batches": len([b for b in batches if b]),
            "rows": rows, "max_batch": max(batches), "heap_peak": heap_peak(spark) - baseline}


def sluice_bytes(v: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    return int(v[:-1]) * units[v[-1].lower()] if v[-1].lower() in units else int(v)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1500)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--bound", default="8m")
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()

    jars = kh.connector_jars()
    broker = kh.Broker(Path(tempfile.mkdtemp(prefix="sluice-bench-kafka-"))).start()
    try:
        kh.ensure_driver_jars(jars)
        spark = session(jars, None)
        kh.create_topic(spark, broker.bootstrap, "backlog", args.partitions)
        kh.produce(spark, broker.bootstrap, "backlog", args.records, args.partitions)
        kh.create_topic(spark, broker.bootstrap, "warmup", args.partitions)
        kh.produce(spark, broker.bootstrap, "warmup", 60, args.partitions)
        # bound: the bound under test; idle bound: sluice with the default 512 MB bound, which this
        # backlog does not reach (the cost of the mechanism when it does not throttle).
        results: dict[str, list[dict]] = {"bound": [], "idle bound": [], "none": [], "maxOffsets": []}
        max_offsets = None
        for rep in range(args.reps):
            spark = warmed(session(jars, args.bound), broker)
            results["bound"].append(drain(spark, broker, "backlog"))
            results["idle bound"].append(drain(spark, broker, "backlog", **{"sluice.maxBytesPerTrigger": "512m"}))
            if max_offsets is None:  # the same average batch size, in records
                r = results["bound"][0]
                max_offsets = max(1, round(r["rows"] / r["batches"]))
            spark = warmed(session(jars, None), broker)
            results["none"].append(drain(spark, broker, "backlog"))
            results["maxOffsets"].append(drain(spark, broker, "backlog", maxOffsetsPerTrigger=max_offsets))
            print(f"rep {rep}: " + ", ".join(f"{k} {v[-1]['seconds']:.1f}s" for k, v in results.items()),
                  flush=True)
        best = {k: min(v, key=lambda r: r["seconds"]) for k, v in results.items()}
        print(f"\nbacklog: {args.records} records of 100 B-100 KB in {args.partitions} partitions, "
              f"{best['none']['bytes'] / 2**20:.1f} MiB; bound {args.bound}; "
              f"maxOffsetsPerTrigger={max_offsets}; best of {args.reps}")
        print(f"{'variant':<12}{'seconds':>9}{'MiB/s':>9}{'batches':>9}{'max batch MiB':>15}{'heap peak MiB':>15}")
        for k, r in best.items():
            print(f"{k:<12}{r['seconds']:>9.1f}{r['bytes'] / 2**20 / r['seconds']:>9.2f}{r['batches']:>9}"
                  f"{r['max_batch'] / 2**20:>15.2f}{r['heap_peak'] / 2**20:>15.0f}")
        tput = {k: r["bytes"] / r["seconds"] for k, r in best.items()}
        print(f"\nthroughput bound / maxOffsetsPerTrigger: {tput['bound'] / tput['maxOffsets']:.3f}")
        print(f"throughput bound / no bound:             {tput['bound'] / tput['none']:.3f}")
        print(f"throughput idle bound / no bound:        {tput['idle bound'] / tput['none']:.3f}")
        print(f"peak heap bound / no bound:              {best['bound']['heap_peak'] / best['none']['heap_peak']:.3f}")
        print(f"largest batch bound / bound:             {best['bound']['max_batch'] / sluice_bytes(args.bound):.3f}")
    finally:
        stop_session()
        broker.stop()


if __name__ == "__main__":
    main()
