"""Record-cache benchmark (issues 5 and 16): Zipf(1.1) keys, 1 s micro-batches, three sides.

defaults: Spark's RocksDB state store at its defaults, commit interval 0 (Spark's own output).
without:  Spark's RocksDB state store with changelog checkpointing on (its fastest setting), interval 0.
with:     sluice.cache.CachingStateStoreProvider over RocksDB (changelog checkpointing on) +
          spark.sluice.commit.interval.ms=30s: write-behind (the delegate commits every 30 s) and
          the emission cache.

Prints rows reaching the sink, delegate reads, writes and commits of the aggregation's store,
RocksDB's own get/put counters, processing throughput, and ratios; runs through bench/harness.py.
Usage: .venv/bin/python bench/cache/bench.py [--batches 75] [--rows 20000] [--keys 1000] [--repeat 2]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import Harness  # noqa: E402

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
CACHING = "sluice.cache.CachingStateStoreProvider"


def zipf_files(root: Path, batches: int, rows: int, keys: int, s: float, seed: int) -> None:
    weights = list(itertools.accumulate(1 / (i ** s) for i in range(1, keys + 1)))
    rnd = random.Random(seed)
    for b in range(batches):
        ks = rnd.choices(range(keys), cum_weights=weights, k=rows)
        (root / f"part-{b:05d}.json").write_text(
            "\n".join(f'{{"k":"user-{k}","v":{rnd.randrange(1000)}}}' for k in ks) + "\n")


CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"


def run(spark: SparkSession, name: str, inputs: Path, ckpt: Path, provider: str, interval: str,
        changelog: bool, total_rows: int) -> dict:
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", provider)
    spark.conf.set("spark.sluice.commit.interval.ms", interval)
    spark.conf.set(CHANGELOG, str(changelog).lower())
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
    spark.conf.unset(CHANGELOG)

    ps = [progress[b] for b in sorted(progress)]
    ops = [op for p in ps for op in p.get("stateOperators", [])]

    def metric(key: str, op_name: str | None = None) -> int:
        return sum(op["customMetrics"].get(key, 0) for op in ops if op_name in (None, op["operatorName"]))

    agg_ops = [op for op in ops if op["operatorName"] != "emitCache"]
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
        # Writes and commits that reached the aggregation's RocksDB store: the cache's own counts
        # when it is there, else every put the operator made and one commit per store and batch.
        "agg_delegate_writes": (sum(op["customMetrics"].get("delegateWrites", 0) for op in agg_ops)
                                if provider == CACHING else
                                sum(op["customMetrics"].get("rocksdbPutCount", 0) for op in agg_ops)),
        "agg_delegate_reads": sum(op["customMetrics"].get("delegateReads", 0) for op in agg_ops),
        "agg_delegate_commits": (sum(op["customMetrics"].get("delegateCommits", 0) for op in agg_ops)
                                 if provider == CACHING else sum(op["numShufflePartitions"] for op in agg_ops)),
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
    ap.add_argument("--repeat", type=int, default=2,
                    help="run this many without/with pairs, which one goes first alternating")
    args = ap.parse_args()

    h = Harness("cache", "record cache and emission cache (KIP-63) against Spark's RocksDB store", {
        "workload": f"Zipf({args.zipf}) over {args.keys} keys, {args.batches} x {args.rows} rows, 1 s micro-batches, "
                    "local[2], 2 state partitions, groupBy(k).agg(count, sum), noop sink",
        "defaults": f"{ROCKSDB} at its defaults, commit interval 0 (Spark's own update-mode output)",
        "without": f"{ROCKSDB}, {CHANGELOG}=true, commit interval 0",
        "with": f"{CACHING} over RocksDB ({CHANGELOG}=true), statestore.cache.max.bytes=10m, "
                "commit.interval.ms=30s (write-behind + emission cache)",
    })
    root = Path(tempfile.mkdtemp(prefix="sluice-bench-cache-"))
    sides = {"defaults": (ROCKSDB, "0", False), "without": (ROCKSDB, "0", True), "with": (CACHING, "30s", True)}
    try:
        inputs = root / "in"
        inputs.mkdir()
        zipf_files(inputs, args.batches, args.rows, args.keys, args.zipf, seed=7)
        SparkContext._ensure_initialized(conf=SparkConf().set("spark.jars", sluice.jar_path()))
        builder = (SparkSession.builder.master("local[2]").appName("sluice-bench-cache")
                   .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
                   .config("spark.driver.memory", "2g").config("spark.ui.showConsoleProgress", "false"))
        spark = sluice.configure(builder, statestore_cache_max_bytes="10m").getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        total = args.batches * args.rows
        warm = root / "warm"
        warm.mkdir()
        zipf_files(warm, 8, args.rows, args.keys, args.zipf, seed=8)
        runs = h.alternating(
            ["defaults", "without", "with"], args.repeat,
            lambda side, i: run(spark, side, inputs, root / f"ckpt-{side}-{i}", *sides[side], total),
            warmup=lambda side: run(spark, "warm-up", warm, root / f"ckpt-warm-{side}", *sides[side], 8 * args.rows))
        spark.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def ratio(a: float, b: float) -> float:
        return a / b if b else float("inf")
    for i, (de, wo, wi) in enumerate(zip(runs["defaults"], runs["without"], runs["with"])):
        print(f"   repeat {i + 1}: throughput without(changelog)/defaults {ratio(wo['rows_per_s'], de['rows_per_s']):.2f}, "
              f"with/defaults {ratio(wi['rows_per_s'], de['rows_per_s']):.2f}; delegate commits "
              f"with {wi['agg_delegate_commits']} / without {wo['agg_delegate_commits']}, delegate writes "
              f"with {wi['agg_delegate_writes']} / without {wo['agg_delegate_writes']}")
        print(f"   repeat {i + 1}: rocksdb writes with/without {ratio(wi['rocksdb_puts'], wo['rocksdb_puts']):.2f}, "
              f"RocksDB gets incl. its get-before-put {ratio(wi['rocksdb_gets'], wo['rocksdb_gets']):.2f} "
              "(with: RocksDB's counters of the batches where it committed)")
        h.target(f"rows to sink without/with, repeat {i + 1}", ratio(wo["rows_to_sink"], wi["rows_to_sink"]), ">=", 20)
        # Point reads the operator sent to its store: RocksDB's get count less the get it adds to
        # every put to count rows (trackTotalNumberOfRows, on by default; nothing is removed here).
        # (with: the cache's own count, since RocksDB's counters are left out of the batches where
        # the delegate did not commit)
        h.target(f"delegate reads with/without, repeat {i + 1}",
                 ratio(wi["agg_delegate_reads"], wo["agg_rocksdb_gets"] - wo["agg_rocksdb_puts"]), "<=", 0.5)
        h.target(f"delegate writes with/without, repeat {i + 1}",
                 ratio(wi["agg_delegate_writes"], wo["agg_delegate_writes"]), "<=", 0.1)
        h.target(f"delegate commits with/without, repeat {i + 1}",
                 ratio(wi["agg_delegate_commits"], wo["agg_delegate_commits"]), "<=", 0.1)
        h.target(f"throughput with/without (changelog on), repeat {i + 1}",
                 ratio(wi["rows_per_s"], wo["rows_per_s"]), ">=", 1.3)
    h.write()


if __name__ == "__main__":
    main()
