"""Throughput and memory of draining a Kafka backlog with sluice's byte bound
(spark.sluice.input.buffer.max.bytes) vs no bound vs maxOffsetsPerTrigger tuned to the same
average batch size, on a real local Kafka broker (tests/support/kafka.py), in one run.

    .venv/bin/python bench/input/bench_input.py [--records 1500] [--bound 8m] [--reps 2]

Each query drains the whole backlog from the earliest offsets with a fresh checkpoint; its
foreachBatch shuffles the batch into 2 partitions and sorts them by value, so the whole batch is
held in memory at once, as a sorting or stateful consumer would hold it. Throughput = key+value
bytes / wall time to drain; "max batch" is the largest batch's key+value bytes.

Memory: Spark's own accounting of the memory tasks hold, read from the driver UI's REST API after
each run: per task, `peakExecutionMemory` (the most execution memory, here the sort's pages and
pointer array, the task held at once). A batch's jobs are found by the query's job group and the
batch id in their description; a batch's peak is the largest sum of the peaks of tasks whose run
times overlap (an upper bound on what its tasks held at one moment), and a run's peak is the
largest over its batches. Sort pages are allocated `spark.buffer.pageSize` at a time; the bench sets
it to 1 MiB (Spark's default here would be 32 MiB pages, which floor every sort at 2 x 32 MiB) so
that the measurement follows the data held rather than page rounding; `--page-size` changes it.
Each session first drains the backlog once, unrecorded, to warm up; its two variants then run in
alternating order between reps. The best of `reps` (by time) is reported, with the memory of that run.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.request
from datetime import datetime
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from pyspark.sql import DataFrame, SparkSession, functions as F  # noqa: E402

from support import kafka as kh  # noqa: E402
from support.session import BASE_CONF, fresh_builder, stop_session  # noqa: E402
import sluice  # noqa: E402
from sluice._conf import parse_bytes  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import Harness  # noqa: E402


PAGE_SIZE = "1m"


def session(jars: list[str], bounded: str | None) -> SparkSession:
    stop_session()
    b = fresh_builder().master("local[2]").appName("sluice-bench-input")
    conf = {**BASE_CONF, "spark.driver.memory": "2g", "spark.jars": ",".join(jars),
            "spark.ui.enabled": "true", "spark.ui.port": "0", "spark.ui.showConsoleProgress": "false",
            "spark.buffer.pageSize": PAGE_SIZE}
    for k, v in conf.items():
        b = b.config(k, v)
    if bounded is not None:
        b = sluice.configure(b, input_buffer_max_bytes=bounded)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def rest(spark: SparkSession, path: str):  # type: ignore[no-untyped-def]
    sc = spark.sparkContext
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/{path}"
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


def _millis(ts: str) -> float:
    return datetime.strptime(ts.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp() * 1000


def batch_memory_peaks(spark: SparkSession, run_id: str) -> dict[int, int]:
    """Per batch id of the query run `run_id`: the largest sum of peakExecutionMemory over tasks
    whose run times overlap, over all jobs of the batch."""
    stages: dict[int, list[int]] = {}
    for job in rest(spark, "jobs"):
        if job.get("jobGroup") != run_id:
            continue
        m = re.search(r"batch = (\d+)", job.get("description", ""))
        if m:
            stages.setdefault(int(m.group(1)), []).extend(job["stageIds"])
    peaks = {}
    for batch, ids in stages.items():
        tasks = []  # (start ms, end ms, peak bytes)
        for sid in set(ids):
            for attempt in rest(spark, f"stages/{sid}"):
                for t in rest(spark, f"stages/{sid}/{attempt['attemptId']}/taskList?length=100000"):
                    if "taskMetrics" in t:
                        start = _millis(t["launchTime"])
                        tasks.append((start, start + t.get("duration", 0),
                                      t["taskMetrics"]["peakExecutionMemory"]))
        peaks[batch] = max((sum(p for s, e, p in tasks if s <= t0 < e or s == t0)
                            for t0, _, _ in tasks), default=0)
    return peaks


def drain(spark: SparkSession, broker: kh.Broker, topic: str, **options: object) -> dict:
    batches: list[int] = []

    def sink(df: DataFrame, _: int) -> None:
        # A consumer that holds its batch: shuffle and sort it (the sort buffers hold the batch).
        # first() depends on the order, so the optimizer keeps the sort (a plain sum would drop it).
        r = (df.repartition(2).sortWithinPartitions("value")
             .agg(F.sum(F.length("key") + F.length("value")).alias("b"), F.first("offset"))).first()
        batches.append(int(r.b or 0))

    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for k, v in options.items():
        reader = reader.option(k, str(v))
    t0 = time.monotonic()
    q = (reader.load().writeStream.foreachBatch(sink)
         .option("checkpointLocation", tempfile.mkdtemp(prefix="sluice-bench-")).start())
    q.processAllAvailable()
    seconds = time.monotonic() - t0
    rows = sum(p["numInputRows"] for p in q.recentProgress)
    run_id = str(q.runId)
    q.stop()
    peaks = batch_memory_peaks(spark, run_id)
    return {"seconds": seconds, "bytes": sum(batches), "batches": len([b for b in batches if b]),
            "rows": rows, "max_batch": max(batches), "mem_peak": max(peaks.values(), default=0)}


def main() -> None:
    global PAGE_SIZE
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1500)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--bound", default="8m")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--page-size", default=PAGE_SIZE)
    args = ap.parse_args()
    PAGE_SIZE = args.page_size

    h = Harness("input", "draining a Kafka backlog: sluice's byte bound vs no bound vs maxOffsetsPerTrigger", {
        "workload": f"{args.records} records of 100 B-100 KB in {args.partitions} partitions, local[2], "
                    "each batch shuffled into 2 partitions and sorted (held in memory at once)",
        "bound": f"spark.sluice.input.buffer.max.bytes={args.bound}",
        "idle bound": "sluice with the default 512 MB bound, which this backlog does not reach",
        "none / maxOffsets": "the same session without sluice; maxOffsetsPerTrigger = the bound's average "
                             "batch size in records (from the warm-up drain)",
        "spark.buffer.pageSize": PAGE_SIZE,
        "order": "bound and idle bound alternate in one session, none and maxOffsets in another; "
                 "each session drains the backlog once unrecorded first",
    })
    jars = kh.connector_jars()
    broker = kh.Broker(Path(tempfile.mkdtemp(prefix="sluice-bench-kafka-"))).start()
    try:
        kh.ensure_driver_jars(jars)
        spark = session(jars, None)
        kh.create_topic(spark, broker.bootstrap, "backlog", args.partitions)
        kh.produce(spark, broker.bootstrap, "backlog", args.records, args.partitions)
        # bound: the bound under test; idle bound: sluice with the default 512 MB bound, which this
        # backlog does not reach (the cost of the mechanism when it does not throttle).
        results: dict[str, list[dict]] = {"bound": [], "idle bound": [], "none": [], "maxOffsets": []}
        max_offsets = None
        for rep in range(args.reps):
            # Each session first drains the backlog once unrecorded (a warm JVM, JIT and session),
            # then runs its two variants, in alternating order between reps.
            spark = session(jars, args.bound)
            warm = drain(spark, broker, "backlog")
            if max_offsets is None:  # the bound's average batch size, in records
                max_offsets = max(1, round(warm["rows"] / warm["batches"]))
            runs = [("bound", {}), ("idle bound", {"sluice.maxBytesPerTrigger": "512m"})]
            for name, opts in (runs if rep % 2 == 0 else runs[::-1]):
                results[name].append(drain(spark, broker, "backlog", **opts))
            spark = session(jars, None)
            drain(spark, broker, "backlog", maxOffsetsPerTrigger=max_offsets)
            runs = [("none", {}), ("maxOffsets", {"maxOffsetsPerTrigger": max_offsets})]
            for name, opts in (runs if rep % 2 == 0 else runs[::-1]):
                results[name].append(drain(spark, broker, "backlog", **opts))
            print(f"rep {rep}: " + ", ".join(f"{k} {v[-1]['seconds']:.1f}s" for k, v in results.items()),
                  flush=True)
        best = {k: min(v, key=lambda r: r["seconds"]) for k, v in results.items()}
        print(f"\nbacklog: {args.records} records of 100 B-100 KB in {args.partitions} partitions, "
              f"{best['none']['bytes'] / 2**20:.1f} MiB; bound {args.bound}; "
              f"maxOffsetsPerTrigger={max_offsets}; spark.buffer.pageSize={PAGE_SIZE}; best of {args.reps}")
        bound = parse_bytes(args.bound)
        print(f"{'variant':<12}{'seconds':>9}{'MiB/s':>9}{'batches':>9}{'max batch MiB':>15}"
              f"{'exec mem peak MiB':>19}{'peak / bound':>14}")
        for k, r in best.items():
            print(f"{k:<12}{r['seconds']:>9.1f}{r['bytes'] / 2**20 / r['seconds']:>9.2f}{r['batches']:>9}"
                  f"{r['max_batch'] / 2**20:>15.2f}{r['mem_peak'] / 2**20:>19.2f}{r['mem_peak'] / bound:>14.2f}")
        print("all runs (seconds; exec mem peak MiB): " + "; ".join(
            f"{k} " + ", ".join(f"{r['seconds']:.1f}s/{r['mem_peak'] / 2**20:.1f}" for r in v)
            for k, v in results.items()))
        tput = {k: r["bytes"] / r["seconds"] for k, r in best.items()}
        h.runs = results
        h.target("throughput bound / maxOffsetsPerTrigger (best of reps)", tput["bound"] / tput["maxOffsets"], ">=", 0.95)
        h.target("throughput idle bound / no bound (best of reps)", tput["idle bound"] / tput["none"], ">=", 0.95)
        h.target("exec memory peak bound / bound (\"near the bound\")", best["bound"]["mem_peak"] / bound, "<=", 1.25)
        h.target("largest batch bound / bound", best["bound"]["max_batch"] / bound, "<=", 1.0)
        print(f"   throughput bound / no bound: {tput['bound'] / tput['none']:.3f} (the price of bounding: more batches)")
        print(f"   exec memory peak bound / no bound: {best['bound']['mem_peak'] / best['none']['mem_peak']:.3f}, "
              f"bound / maxOffsets: {best['bound']['mem_peak'] / best['maxOffsets']['mem_peak']:.3f}")
        h.write(max_offsets_per_trigger=max_offsets)
    finally:
        stop_session()
        broker.stop()


if __name__ == "__main__":
    main()
