"""The sluice side of bench/kafka_streams: one process (this Python driver and its Spark JVM,
local[2]) running the bench's topology with sluice's Python API, as a user would write it. Started
by bench.py once per run; prints JSON lines (config, started, stopped) and stops when "stop"
arrives on stdin.

    spark_side.py --bootstrap B --input T --output O --checkpoint DIR --heap 4g [--trigger 0]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from pyspark.sql import SparkSession, functions as F  # noqa: E402

import kafka_harness as kh  # noqa: E402
import sluice  # noqa: E402
from sluice import BufferConfig, Suppressed, suppress  # noqa: E402


def vm_hwm_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return -1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--heap", default="4g")
    ap.add_argument("--trigger", default="0", help="processing-time trigger interval; 0 = Spark's default "
                    "(the next micro-batch starts as soon as the previous one ends)")
    ap.add_argument("--max-offsets", type=int, default=0, help="maxOffsetsPerTrigger (0: not set)")
    ap.add_argument("--ui", action="store_true", help="keep Spark's UI on (for profiling)")
    args = ap.parse_args()

    conf = {
        "spark.driver.memory": args.heap,
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "true" if args.ui else "false",
        "spark.sql.session.timeZone": "UTC",
        # recentProgress is where this script reads per-batch figures and dropped rows from
        "spark.sql.streaming.numRecentProgressUpdates": "100000",
        "spark.jars": ",".join(kh.connector_jars()),
    }
    builder = SparkSession.builder.master("local[2]").appName("sluice-vs-kafka-streams")
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = sluice.configure(builder, state_store="in_memory_window").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    jvm_pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())

    source = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.input)
              .option("startingOffsets", "earliest"))
    if args.max_offsets:
        source = source.option("maxOffsetsPerTrigger", str(args.max_offsets))
    events = source.load().select(F.col("key").cast("string").alias("k"), F.col("timestamp").alias("ts"))
    counts = (events.withWatermark("ts", "10 seconds")
              .groupBy(F.window("ts", "1 minute"), "k").count())
    final = suppress(counts, Suppressed.until_window_closes(BufferConfig.unbounded()))
    out = final.select(F.col("k").alias("key"),
                       F.concat_ws(":", F.unix_millis(F.col("window.start")).cast("string"),
                                   F.col("count").cast("string")).alias("value"))
    writer = (out.writeStream.outputMode("update").format("kafka")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("topic", args.output)
              .option("checkpointLocation", args.checkpoint))
    if args.trigger != "0":
        writer = writer.trigger(processingTime=args.trigger)
    settings = {**conf, "spark.jars": "Kafka connector (dev/fetch-kafka) + sluice.jar",
                "state store": spark.conf.get("spark.sql.streaming.stateStore.providerClass"),
                "suppress": "until_window_closes(unbounded()) (fused into the aggregation: "
                            f"spark.sluice.suppress.fused={spark.conf.get('spark.sluice.suppress.fused', 'true')})",
                "trigger": args.trigger if args.trigger != "0" else "default (as soon as possible)",
                "maxOffsetsPerTrigger": args.max_offsets or "not set",
                "spark.sluice.input.buffer.max.bytes": spark.conf.get("spark.sluice.input.buffer.max.bytes", "default")}
    print(json.dumps({"event": "config", "spark": settings}), flush=True)

    start_ms = int(time.time() * 1000)
    query = writer.start()
    print(json.dumps({"event": "started", "start_ms": start_ms}), flush=True)
    while query.lastProgress is None and query.isActive:  # the first (possibly empty) batch ran
        time.sleep(0.05)
    print(json.dumps({"event": "running", "running_ms": int(time.time() * 1000)}), flush=True)

    for line in sys.stdin:
        if line.strip() == "stop":
            break
    progress = query.recentProgress
    failure = query.exception()
    query.stop()
    dropped = sum(op.get("numRowsDroppedByWatermark", 0)
                  for p in progress for op in p.get("stateOperators", []))
    batches = [{"batch": p["batchId"], "rows": p["numInputRows"],
                "ms": p["durationMs"].get("triggerExecution", 0),
                "durations": p["durationMs"],
                "state": [{k: op.get(k) for k in ("numRowsTotal", "numRowsUpdated", "numRowsRemoved",
                                                   "allUpdatesTimeMs", "allRemovalsTimeMs", "commitTimeMs",
                                                   "memoryUsedBytes")}
                          for op in p.get("stateOperators", [])]} for p in progress]
    print(json.dumps({"event": "stopped", "dropped_records": dropped,
                      "vm_hwm_kb": vm_hwm_kb(jvm_pid) + vm_hwm_kb(os.getpid()),
                      "jvm_hwm_kb": vm_hwm_kb(jvm_pid), "batches": batches,
                      "failure": str(failure)[:2000] if failure else None}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
