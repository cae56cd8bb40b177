"""The sluice sides of bench/peers: one query per process (this Python driver and its Spark JVM),
written with sluice's Python API as a user would. Prints JSON lines (config, started, running,
stopped) and stops when "stop" comes on stdin.

    spark_side.py --query Q --bootstrap B --input T --output O --checkpoint DIR --lateness-ms L [--heap 4g]
                  [--realtime "5 seconds" --cores 4]

Micro-batch (the `sluice` side, local[2]): every query is an update-mode window aggregation under
``suppress(..., Suppressed.until_window_closes(BufferConfig.unbounded()))``, which sluice fuses into
the aggregation (each window emitted once, when the watermark passes its end); q11's is a
``session_window`` aggregation (sluice runs session windows in update mode). q5's second
step (the auctions with the most bids in each window) runs on each micro-batch's final counts in
``foreachBatch``: a window's counts are all released in the same micro-batch. State store: sluice's
in-memory window store (``state_store="in_memory_window"``). Everything else is sluice's product
default: no other ``spark.sluice.*`` key is set unless the experimental rewrite is turned on
(bench.py's `sluice-exp` side turns it on): ``--json-decoder sluice`` (``json_decoder="sluice"``),
``from_json`` decoded by sluice from the record's bytes instead of Spark's parser.

Real-time (the `sluice-rt` side, ``--realtime``; the count, q7 and q8, the queries of tumbling windows
under suppress written to the Kafka sink): the same pipeline with
``trigger(realTime=...)``, the duration being Spark's checkpoint interval. Spark allows only its own
RocksDB provider there, so no state store is set; suppress is not fused (sluice closes each window
on its partition's stream time, per row); the Kafka sink (real-time mode refuses foreachBatch).
Real-time mode runs every stage's tasks at once, so the master needs a slot per source partition
plus one per shuffle partition (``--cores``).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from pyspark.sql import SparkSession, Window, functions as F, types as T  # noqa: E402

from support import kafka as kh  # noqa: E402
import sluice  # noqa: E402
from sluice import BufferConfig, Suppressed, suppress  # noqa: E402

from bench import EXPERIMENTAL, RT_QUERIES  # noqa: E402  (bench.py, beside this file)

L = T.LongType()
S = T.StringType()
PERSON = T.StructType([T.StructField(n, t) for n, t in [
    ("id", L), ("name", S), ("emailAddress", S), ("creditCard", S), ("city", S), ("state", S), ("dateTime", L),
    ("extra", S)]])
AUCTION = T.StructType([T.StructField(n, t) for n, t in [
    ("id", L), ("itemName", S), ("description", S), ("initialBid", L), ("reserve", L), ("dateTime", L),
    ("expires", L), ("seller", L), ("category", L), ("extra", S)]])
BID = T.StructType([T.StructField(n, t) for n, t in [
    ("auction", L), ("bidder", L), ("price", L), ("channel", S), ("url", S), ("dateTime", L), ("extra", S)]])
EVENT = T.StructType([T.StructField("event_type", T.IntegerType()), T.StructField("person", PERSON),
                      T.StructField("auction", AUCTION), T.StructField("bid", BID)])


def vm_hwm_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return -1


def final(agg):
    return suppress(agg, Suppressed.until_window_closes(BufferConfig.unbounded()))


def ms(c):
    return F.unix_millis(c).cast("string")


# The wall clock of the row passing through (a static Java call per row: Spark evaluates it where it
# stands, not once per batch as current_timestamp()).
WALL_CLOCK_MS = "reflect('java.lang.System', 'currentTimeMillis')"


def build(spark: SparkSession, q: str, source, late: str, stamp_emit: bool = False, count_window_ms: int = 60_000):
    """The query's output: a DataFrame with one string column `value` (the canonical row), and the
    output mode; or for q5 a foreachBatch function."""
    raw = source.load()
    if q == "count":
        ev = raw.select(F.col("key").cast("string").alias("k"), F.col("timestamp").alias("ts"))
        counts = ev.withWatermark("ts", late).groupBy(F.window("ts", f"{count_window_ms} milliseconds"), "k").count()
        value = F.concat_ws(",", "k", ms("window.start"), F.col("count").cast("string")).alias("value")
        stamp = [F.expr(WALL_CLOCK_MS).alias("key")] if stamp_emit else []
        return final(counts).select(value, *stamp), "update", None
    # Nexmark: every record parsed once, the watermark on the whole stream, then the event type the query
    # reads. Event time is the record's timestamp (the event's dateTime, as the generator writes both), as
    # on the other sides. The parse goes through a generator (inline of a one-element array) because
    # Spark's optimizer copies a projected from_json into every filter it pushes below the projection:
    # written as select(from_json(...).alias("e")).select("e.*"), the event-type filter and the window's
    # non-null event time each parsed the record again (three parses per bid); no filter is pushed
    # through a generator.
    ev = (raw.select(F.col("timestamp").alias("ts"), F.inline(F.array(F.from_json(F.col("value").cast("string"), EVENT))))
          .withWatermark("ts", late))
    bids = ev.where("event_type = 2")
    if q == "q5":
        counts = bids.groupBy(F.window("ts", "10 seconds", "2 seconds"), F.col("bid.auction").alias("auction")).count()

        def hottest(df, batch_id):
            w = Window.partitionBy("window")
            (df.withColumn("mx", F.max("count").over(w)).where("count = mx")
             .select(F.concat_ws(",", ms("window.start"), F.col("auction").cast("string"),
                                 F.col("count").cast("string")).alias("value"))
             .write.format("kafka").option("kafka.bootstrap.servers", source_bootstrap)
             .option("topic", output_topic).save())

        return final(counts), "update", hottest
    if q == "q7":
        best = bids.groupBy(F.window("ts", "10 seconds")).agg(
            F.max(F.struct(F.col("bid.price").alias("price"), F.col("bid.dateTime").alias("dateTime"),
                           F.col("bid.auction").alias("auction"), F.col("bid.bidder").alias("bidder"))).alias("b"))
        return final(best).select(F.concat_ws(",", ms("window.start"), *[F.col(f"b.{f}").cast("string") for f in
                                                                        ("price", "dateTime", "auction", "bidder")])
                                  .alias("value")), "update", None
    if q == "q8":
        # Persons and auctions in one pass over the stream (a union of two filters of it would read and
        # parse every record twice): a person keyed by its id, an auction by its seller.
        people = ev.where("event_type in (0, 1)").select(
            "ts", F.when(F.col("event_type") == 0, F.col("person.id")).otherwise(F.col("auction.seller")).alias("id"),
            F.col("person.name").alias("name"), (F.col("event_type") == 0).cast("int").alias("p"))
        joined = people.groupBy(F.window("ts", "10 seconds"), "id").agg(
            F.max("name").alias("name"), F.max("p").alias("has_person"), F.min("p").alias("has_no_person"))
        return (final(joined).where("has_person = 1 and has_no_person = 0")
                .select(F.concat_ws(",", ms("window.start"), F.col("id").cast("string"), "name").alias("value")),
                "update", None)
    if q == "q11":
        # Update mode with final results: one row per session once the watermark passes its end; a
        # session merged into another is never emitted (suppress drops its buffered row on the retraction).
        sessions = bids.groupBy(F.session_window("ts", "10 seconds"), F.col("bid.bidder").alias("bidder")).count()
        return final(sessions).select(F.concat_ws(",", F.col("bidder").cast("string"), ms("session_window.start"),
                                                  ms("session_window.end"), F.col("count").cast("string"))
                                      .alias("value")), "update", None
    raise ValueError(f"unknown query {q}")


source_bootstrap = ""
output_topic = ""


def sink_producer_metrics(spark: SparkSession) -> dict:
    """The Kafka sink's producer metrics (bench/peers' ProducerMetrics, in the SendStamp jar): where a
    result waits between the producer's send and the broker's append."""
    return json.loads(spark._jvm.ProducerMetrics.json())


def iso_ms(ts: str) -> int:
    """A progress event's timestamp (its batch's start, ISO 8601 in UTC) in epoch milliseconds."""
    return int(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1000)


def main() -> None:
    global source_bootstrap, output_topic
    ap = argparse.ArgumentParser()
    ap.add_argument("--query", required=True)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--lateness-ms", type=int, required=True)
    ap.add_argument("--heap", default="4g")
    ap.add_argument("--count-window-ms", type=int, default=60_000, help="the count's tumbling window")
    ap.add_argument("--java-option", action="append", default=[], help="a JVM option of the driver (a profiler)")
    ap.add_argument("--trigger", default="0", help="processing-time trigger; 0 = Spark's default")
    ap.add_argument("--max-offsets", type=int, default=0, help="maxOffsetsPerTrigger (0: not set)")
    # The experimental rewrites, each off (sluice's product default) unless given.
    ap.add_argument("--json-decoder", default="spark", choices=["sluice", "spark"],
                    help="experimental, sluice's json_decoder option: who parses from_json's input")
    ap.add_argument("--sink-option", action="append", default=[], help="KEY=VALUE: an option of the Kafka sink "
                    "(e.g. kafka.linger.ms=0)")
    ap.add_argument("--source-option", action="append", default=[], help="KEY=VALUE: an option of the Kafka source "
                    "(e.g. kafka.max.poll.records=20000)")
    ap.add_argument("--extra-jar", action="append", default=[], help="a jar added to spark.jars beside the Kafka "
                    "connector's (--stamp-emit: bench/peers' SendStamp interceptor)")
    ap.add_argument("--spark-conf", action="append", default=[], help="KEY=VALUE: a Spark setting of the session")
    ap.add_argument("--stamp-emit", action="store_true", help="the count: key each result by the wall clock at "
                    "which the projection above suppress passed it on")
    ap.add_argument("--realtime", default="", help="real-time trigger with this checkpoint interval "
                    "(e.g. '5 seconds'); empty: micro-batch")
    ap.add_argument("--cores", type=int, default=2, help="local[N]")
    ap.add_argument("--shuffle-wait-ms", type=int, default=-1,
                    help="real-time: spark.shuffle.streaming.networkBufferMaxWaitTimeMs, how long Spark's pipelined "
                         "shuffle holds a partly filled buffer (-1: Spark's default, 50 ms)")
    args = ap.parse_args()
    rt = bool(args.realtime)
    if rt and args.query not in RT_QUERIES:
        raise SystemExit(f"--realtime: only {', '.join(RT_QUERIES)} (tumbling windows under suppress) run in real-time "
                         f"mode here, not {args.query}")
    source_bootstrap, output_topic = args.bootstrap, args.output

    conf = {
        "spark.driver.memory": args.heap,
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.numRecentProgressUpdates": "100000",
        "spark.jars": ",".join(kh.connector_jars() + args.extra_jar),
    }
    if args.java_option:
        conf["spark.driver.extraJavaOptions"] = " ".join(args.java_option)
    conf.update(kv.split("=", 1) for kv in args.spark_conf)
    if rt and args.shuffle_wait_ms >= 0:
        # Real-time mode's shuffle sends a buffer when it holds 32 KB or has waited this long: at a few
        # thousand rows per second per reader that wait, not the work, is the shuffle's latency.
        conf["spark.shuffle.streaming.networkBufferMaxWaitTimeMs"] = str(args.shuffle_wait_ms)
    builder = SparkSession.builder.master(f"local[{args.cores}]").appName(f"sluice-peers-{args.query}")
    for k, v in conf.items():
        builder = builder.config(k, v)
    # Real-time mode runs on Spark's RocksDB provider only (Spark refuses any other): no state store set.
    # Only the rewrites turned on are passed: at the product defaults configure() gets none of them.
    flags = {flag: getattr(args, flag.replace("-", "_")) for flag, _, _ in EXPERIMENTAL.values()}
    options: dict = {opt: (on if flag == "json-decoder" else True)
                     for opt, (flag, on, _) in EXPERIMENTAL.items() if flags[flag] == on}
    if not rt:
        options["state_store"] = "in_memory_window"
    spark = sluice.configure(builder, **options).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    jvm_pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())

    source = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.input).option("startingOffsets", "earliest"))
    if args.max_offsets:
        source = source.option("maxOffsetsPerTrigger", str(args.max_offsets))
    for kv in args.source_option:
        source = source.option(*kv.split("=", 1))
    out, mode, per_batch = build(spark, args.query, source, f"{args.lateness_ms} milliseconds", args.stamp_emit,
                                 args.count_window_ms)
    writer = out.writeStream.outputMode(mode).option("checkpointLocation", args.checkpoint)
    if per_batch is not None:
        writer = writer.foreachBatch(per_batch)
    else:
        writer = writer.format("kafka").option("kafka.bootstrap.servers", args.bootstrap).option("topic", args.output)
        if args.stamp_emit:  # and the producer's send (bench/peers/src/tools/SendStamp.java)
            writer = writer.option("kafka.interceptor.classes", "SendStamp")
        for kv in args.sink_option:
            writer = writer.option(*kv.split("=", 1))
    if rt:
        writer = writer.trigger(realTime=args.realtime)
    elif args.trigger != "0":
        writer = writer.trigger(processingTime=args.trigger)
    settings = {**conf, "spark.jars": "Kafka connector (dev/fetch-kafka) + sluice.jar", "query": args.query,
                "master": f"local[{args.cores}]",
                "output mode": mode, "sink": "foreachBatch (Kafka batch write)" if per_batch else "Kafka",
                "final results": "sluice.suppress(until_window_closes(unbounded())), "
                + ("not fused (real-time: per row on each partition's stream time)" if rt else
                   "fused=" + spark.conf.get("spark.sluice.suppress.fused", "true"))
                + (" over an update-mode session_window count" if args.query == "q11" else ""),
                "state store": "Spark's RocksDB (real-time mode's only provider)" if rt else
                spark.conf.get("spark.sql.streaming.stateStore.providerClass"),
                "watermark delay ms": args.lateness_ms,
                "trigger": f"realTime={args.realtime} (checkpoint interval)" if rt else
                args.trigger if args.trigger != "0" else "default (as soon as possible)",
                "maxOffsetsPerTrigger": args.max_offsets or "not set",
                "sluice options": options,
                "experimental rewrites": {opt: "on" if opt in options else "off" for opt in EXPERIMENTAL},
                # every spark.sluice.* key the session was started with (sluice.configure's and --spark-conf's)
                "spark.sluice.* keys set": {k: v for k, v in sorted(spark.sparkContext.getConf().getAll())
                                            if k.startswith("spark.sluice.")},
                "spark.sluice.input.buffer.max.bytes": spark.conf.get("spark.sluice.input.buffer.max.bytes", "default"),
                "spark.sluice.input.fetch.max.bytes": spark.conf.get("spark.sluice.input.fetch.max.bytes", "default")}
    print(json.dumps({"event": "config", "spark": settings}), flush=True)

    start_ms = int(time.time() * 1000)
    query = writer.start()
    print(json.dumps({"event": "started", "start_ms": start_ms}), flush=True)
    while query.lastProgress is None and query.isActive:
        time.sleep(0.05)
    print(json.dumps({"event": "running", "running_ms": int(time.time() * 1000)}), flush=True)

    for line in sys.stdin:
        if line.strip() == "stop":
            break
    # --stamp-emit puts the SendStamp jar, which holds ProducerMetrics, on the driver's class path
    producer = sink_producer_metrics(spark) if args.stamp_emit and per_batch is None else {}
    progress = query.recentProgress
    failure = query.exception()
    query.stop()
    # Late rows: Spark's aggregation drops them below the watermark; real-time suppress drops a row for
    # a window its partition's stream time has already closed (lateRecordDropTotal).
    dropped = sum(op.get("numRowsDroppedByWatermark", 0) + (op.get("customMetrics") or {}).get("lateRecordDropTotal", 0)
                  for p in progress for op in p.get("stateOperators", []))
    batches = [{"batch": p["batchId"], "rows": p["numInputRows"], "ms": p["durationMs"].get("triggerExecution", 0),
                "start_ms": iso_ms(p["timestamp"]),
                "durations": p["durationMs"],
                "state": [{k: op.get(k) for k in ("operatorName", "numRowsTotal", "numRowsUpdated", "numRowsRemoved",
                                                   "allUpdatesTimeMs", "allRemovalsTimeMs", "commitTimeMs",
                                                   "memoryUsedBytes")} |
                          {"customMetrics": op.get("customMetrics") or {}}
                          for op in p.get("stateOperators", [])]} for p in progress]
    print(json.dumps({"event": "stopped", "dropped_records": dropped,
                      "vm_hwm_kb": vm_hwm_kb(jvm_pid) + vm_hwm_kb(os.getpid()), "jvm_hwm_kb": vm_hwm_kb(jvm_pid),
                      "batches": batches, "sink_producer": producer, "failure": str(failure)[:2000] if failure else None}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
