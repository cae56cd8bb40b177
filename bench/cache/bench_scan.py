"""Record cache under a scanning workload (issue 12): a session-window count over RocksDB, whose
state manager prefix-scans each key's sessions, with 100k keys held in the cache.

without: Spark's RocksDB state store.
with:    sluice.cache.CachingStateStoreProvider over RocksDB, a budget that holds every key.

Each scan must flush only the scanned store's pending writes (not walk the whole slot cache), so a
batch costs what it changes whatever the cache holds. Target: median batch time with the cache
<= 1.1x without, the medians over every timed batch of each side's runs. Runs go through
bench/harness.py (warm-up, sides alternating, targets, result file). The pairs are even in number
and the side going first alternates (without/with, then with/without), because whichever side runs
first in a pair runs slower: a single pair's ratio measures the order as much as the cache, so each
pair's ratio is printed but the target is on the pooled medians. The first data batch of each run
(it creates the 100k sessions) is not timed.
Usage: .venv/bin/python bench/cache/bench_scan.py [--keys 100000] [--updates 10000] [--batches 16] [--pairs 2]
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sluice

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import Harness  # noqa: E402

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
CACHING = "sluice.cache.CachingStateStoreProvider"
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def write_inputs(root: Path, keys: int, updates: int, batches: int, seed: int) -> None:
    rnd = random.Random(seed)

    def line(k: int, second: int) -> str:
        ts = (T0 + timedelta(seconds=second)).isoformat().replace("+00:00", "Z")
        return f'{{"k":"user-{k:06d}","ts":"{ts}"}}'

    (root / "part-00000.json").write_text("\n".join(line(k, 0) for k in range(keys)) + "\n")
    for b in range(1, batches + 1):
        ks = rnd.sample(range(keys), updates)  # each extends its key's session (gap 10 minutes)
        (root / f"part-{b:05d}.json").write_text("\n".join(line(k, b) for k in ks) + "\n")


def run(spark: SparkSession, side: str, inputs: Path, ckpt: Path) -> list[int]:
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", CACHING if side == "with" else ROCKSDB)
    try:
        df = (spark.readStream.schema("k STRING, ts TIMESTAMP").option("maxFilesPerTrigger", 1)
              .json(str(inputs)).withWatermark("ts", "1 hour")
              .groupBy(F.session_window("ts", "10 minutes"), "k").count())
        q = (df.writeStream.format("noop").outputMode("append")  # session windows: append only
             .option("checkpointLocation", str(ckpt)).start())
        q.processAllAvailable()
        progress = sorted((json.loads(p.json) for p in q.recentProgress), key=lambda p: p["batchId"])
        q.stop()
    finally:
        spark.conf.unset("spark.sql.streaming.stateStore.providerClass")
    data = [p for p in progress if p["numInputRows"] > 0]
    return [p["durationMs"]["triggerExecution"] for p in data[1:]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--updates", type=int, default=10_000)
    ap.add_argument("--batches", type=int, default=16)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--cache", default="256m")
    args = ap.parse_args()
    if args.pairs < 2 or args.pairs % 2:
        ap.error(f"--pairs must be even and at least 2 (got {args.pairs}), so each side goes first equally often")

    SparkContext._ensure_initialized(conf=SparkConf().set("spark.jars", sluice.jar_path()))
    builder = (SparkSession.builder.master("local[2]").appName("sluice-bench-cache-scan")
               .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
               .config("spark.driver.memory", "4g").config("spark.sql.session.timeZone", "UTC")
               .config("spark.ui.showConsoleProgress", "false"))
    spark = sluice.configure(builder, statestore_cache_max_bytes=args.cache,
                             statestore_cache_delegate="rocksdb").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    h = Harness("cache_scan", "record cache under a prefix-scanning workload (session-window count)", {
        "workload": f"{args.keys} keys, {args.updates} updated per batch, {args.batches} timed batches per run, "
                    "2 shuffle partitions, local[2], maxFilesPerTrigger 1",
        "without": f"{ROCKSDB} at its defaults",
        "with": f"{CACHING} over RocksDB, statestore.cache.max.bytes={args.cache}",
    })
    work = Path(tempfile.mkdtemp(prefix="sluice-bench-scan-"))
    try:
        inputs = work / "in"
        inputs.mkdir()
        write_inputs(inputs, args.keys, args.updates, args.batches, seed=11)
        warm = work / "warm"
        warm.mkdir()
        write_inputs(warm, args.keys // 10, args.updates // 10, 2, seed=12)

        def one(side: str, i: int) -> dict:
            t = run(spark, side, inputs, work / f"ckpt-{i}-{side}")
            return {"median_batch_ms": float(statistics.median(t)), "batch_ms": t}

        runs = h.alternating(["without", "with"], args.pairs, one,
                             warmup=lambda side: run(spark, side, warm, work / f"warm-{side}"))
        ratios = [w["median_batch_ms"] / o["median_batch_ms"] for o, w in zip(runs["without"], runs["with"])]
        for i, r in enumerate(ratios):
            print(f"   pair {i + 1} ({'without first' if i % 2 == 0 else 'with first'}): "
                  f"median batch time with/without {r:.3f}")
        pooled = {side: statistics.median(t for r in runs[side] for t in r["batch_ms"]) for side in runs}
        print(f"   pooled median batch ms: without {pooled['without']}, with {pooled['with']}")
        h.target("median batch time with/without, all timed batches of every pair", pooled["with"] / pooled["without"], "<=", 1.1)
        h.write(pair_ratios=ratios, pooled_median_batch_ms=pooled)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
