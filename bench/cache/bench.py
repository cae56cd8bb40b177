"""Record-cache benchmark (issue 5): Zipf(1.1) keys, 1 s micro-batches, one run with and one without.

without: Spark's RocksDB state store, commit interval 0 (Spark's own update-mode output).
with:    sluice.cache.CachingStateStoreProvider over RocksDB + spark.sluice.commit.interval.ms=30s.

Prints rows reaching the sink, delegate reads (point reads the aggregation sent to RocksDB) and
RocksDB's own get/put counters, processing throughput, and ratios.
Usage: .venv/bin/python bench/cache/bench.py [--batches 75] [--rows 20000] [--keys 1000]
"""
from __future__ import annotations

import argparse
import itertools
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sluice

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
CACHING = "sluice.cache.CachingStateStoreProvider"


def zipf_files(root: Path, batches: int, rows: int, keys: int, s: float, seed: int) -> None:
    weights = list(itertools.accumulate(1 / (i ** s) for i in range(1, keys + 1)))
    rnd = random.Random(seed)
    for b in range(batches):
        ks = rnd.choices(range(keys), cum_weights=weights, k=rows)
        (root / f"part-{b:05d}.json").write_text(
            "\n".join(f'{{"k":"user-{k}","v":{rnd.randrange(1000)}}}' for k in ks) + "\n")


def run(spark: SparkSession, name: str, inputs: Path, ckpt: Path, provider: str, interval: str,
        total_rows: int) -> dict:
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", provider)
    spark.conf.set("spark.sluice.commit.interval.ms", interval)
    df = (spark.readStream.schema("k STRING, v LONG").option("maxFilesPerTrigger", 1).json(str(inputs))
          .groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s")))
    q = (df.writeStream.format("noop").outputMode("update").trigger(processingTime="1 second")
         .option("checkpointLocation", str(ckpt)).start())
    seen = 0
    progress: dict[int, dict] = {}
    while seen < total_rows:
        time.sleep(0.5)
        for p in q.recentProgress:
            progress[p.batchId] = json.loads(p.json)
        seen = sum(p["numInputRows"] for p in progress.values())
    for p in q.recentProgress:
        progress[p.batchId] = json.loads(p.json)
    q.stop()
    spark.conf.unset("spark.sql.streaming.stateStore.providerClass")
    spark.conf.unset("spark.sluice.commit.interval.ms")

    ps = [progress[b] for b in sorted(progress)]
    ops = [op for p in ps for op in p.get("stateOperators", [])]

    def metric(key: str, op_name: str | None = None) -> int:
        return sum(op["customMetrics"].get(key, 0) for op in ops if op_name in (None, op["operatorName"]))

    emit_ops = [op for op in ps[-1].get("stateOperators", []) if op["operatorName"] == "emitCache"]
    data = [p for p in ps if p["numInputRows"] > 0]
    busy_ms = sum(p["durationMs"].get("triggerExecution", 0) for p in data)
    return {
        "name": name,
        "batches": len(data),
        "input_rows": sum(p["numInputRows"] for p in ps),
        "rows_to_sink": sum(max(0, p["sink"].get("numOutputRows", 0)) for p in ps),
        "held_at_end": sum(op["numRowsTotal"] for op in emit_ops),
        "rocksdb_gets": metric("rocksdbGetCount"),
        "rocksdb_puts": metric("rocksdbPutCount"),
        "agg_rocksdb_gets": sum(op["customMetrics"].get("rocksdbGetCount", 0) for op in ops
                                if op["operatorName"] != "emitCache"),
        "agg_rocksdb_puts": sum(op["customMetrics"].get("rocksdbPutCount", 0) for op in ops
                                if op["operatorName"] != "emitCache"),
        "cache_hits": metric("cacheHits"),
        "cache_misses": metric("cacheMisses"),
        "delegate_reads": metric("delegateReads"),
        "delegate_writes": metric("delegateWrites"),
        "emit_forwarded": metric("emitCacheForwardedTotal"),
        "emit_absorbed": metric("emitCacheAbsorbedTotal"),
        "emit_evicted": metric("emitCacheEvictTotal"),
        "busy_s": busy_ms / 1000,
        "median_batch_ms": float(statistics.median(p["durationMs"].get("triggerExecution", 0) for p in data)),
        "rows_per_s": sum(p["numInputRows"] for p in data) / max(busy_ms / 1000, 1e-9),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=75)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--repeat", type=int, default=1,
                    help="run this many without/with pairs, which one goes first alternating")
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="sluice-bench-cache-"))
    try:
        inputs = root / "in"
        inputs.mkdir()
        zipf_files(inputs, args.batches, args.rows, args.keys, args.zipf, seed=7)
        SparkContext._ensure_initialized(conf=SparkConf().set("spark.jars", sluice.jar_path()))
        builder = (SparkSession.builder.master("local[2]").appName("sluice-bench-cache")
                   .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
                   .config("spark.driver.memory", "2g"))
        spark = sluice.configure(builder, statestore_cache_max_bytes="10m").getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        total = args.batches * args.rows
        # Warm-up (JIT, RocksDB native libs) on a few batches of each kind, not measured.
        warm = root / "warm"
        warm.mkdir()
        zipf_files(warm, 8, args.rows, args.keys, args.zipf, seed=8)
        for provider, interval in ((ROCKSDB, "0"), (CACHING, "30s")):
            run(spark, "warm-up", warm, root / f"ckpt-warm-{interval}", provider, interval, 8 * args.rows)
        pairs = []
        for i in range(args.repeat):
            # Alternate which runs first (without, with / with, without, ...): a run's place in the
            # JVM's life (JIT, caches, the previous query's leftovers) must not favour one side.
            order = ["without", "with"] if i % 2 == 0 else ["with", "without"]
            r = {n: run(spark, n, inputs, root / f"ckpt-{n}-{i}", *((ROCKSDB, "0") if n == "without" else (CACHING, "30s")),
                        total) for n in order}
            pairs.append((r["without"], r["with"]))
        spark.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    wo, wi = pairs[0]
    results = [r for p in pairs for r in p]
    print(f"Zipf({args.zipf}) over {args.keys} keys, {args.batches} x {args.rows} rows, 1 s micro-batches, "
          f"local[2], 2 state partitions, cache 10m, commit interval 30 s")
    keys = list(wo)[1:]
    print(f"{'metric':<18}{'without':>14}{'with':>14}")
    for k in keys:
        fmt = (lambda v: f"{v:14.1f}") if isinstance(wo[k], float) else (lambda v: f"{v:14d}")
        print(f"{k:<18}{fmt(wo[k])}{fmt(wi[k])}")

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}" if b else "inf"
    sink_with_tail = wi["rows_to_sink"] + wi["held_at_end"]
    print()
    print(f"rows to sink: {ratio(wo['rows_to_sink'], wi['rows_to_sink'])}x fewer "
          f"({ratio(wo['rows_to_sink'], sink_with_tail)}x counting the rows still held at the end) [target >= 20x]")
    # Reads the operator sent to its store: RocksDB's get count less the one get it adds to every
    # put to count rows (trackTotalNumberOfRows, on by default; this workload removes nothing).
    wo_reads = wo["agg_rocksdb_gets"] - wo["agg_rocksdb_puts"]
    wi_reads = wi["agg_rocksdb_gets"] - wi["agg_rocksdb_puts"]
    print(f"delegate reads (point reads sent to the aggregation's RocksDB store): {wo_reads} -> {wi_reads}, "
          f"with/without = {ratio(wi_reads, wo_reads)} [target <= 0.5] "
          f"(with: the cache's own delegateReads count = {wi['delegate_reads']})")
    print(f"RocksDB get calls incl. its get-before-put (all operators): with/without = "
          f"{ratio(wi['rocksdb_gets'], wo['rocksdb_gets'])}")
    print(f"RocksDB writes (all operators): with/without = {ratio(wi['rocksdb_puts'], wo['rocksdb_puts'])}; "
          f"aggregation's store only: {ratio(wi['agg_rocksdb_puts'], wo['agg_rocksdb_puts'])}")
    print(f"throughput (input rows per busy second): with/without = {ratio(wi['rows_per_s'], wo['rows_per_s'])} "
          f"[target >= 1.0]; median batch time without/with = "
          f"{ratio(wo['median_batch_ms'], wi['median_batch_ms'])}")
    if len(pairs) > 1:
        tp = [w["rows_per_s"] / o["rows_per_s"] for o, w in pairs]
        med = [o["median_batch_ms"] / w["median_batch_ms"] for o, w in pairs]
        print(f"repeated pairs (order alternating): throughput with/without = "
              f"{', '.join(f'{r:.2f}' for r in tp)} (median {statistics.median(tp):.2f}); "
              f"median batch time without/with = {', '.join(f'{r:.2f}' for r in med)}")
    print(json.dumps(results), file=sys.stderr)


if __name__ == "__main__":
    main()
