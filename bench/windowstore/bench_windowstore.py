"""Window store end to end, through bench/harness.py: `groupBy(window(ts, 10 s), k).count()`,
update mode, no watermark, noop sink, 1000 window starts, on each state store provider with a
small and a large live state. Batch 0 creates the live keys; each of the next batches is one file
of `--batch-rows` rows, half updating existing keys, half adding new ones; the median
`triggerExecution` of every batch after the first is one run's figure. Sides (provider x size)
alternate over the repeats, after one small warm-up query per provider.

Target (README): with the in-memory window store, the median batch at the large state <= 1.2x that
at the small state. The providers' ratios at each size are printed without a target.

    .venv/bin/python bench/windowstore/bench_windowstore.py [--small 50000] [--large 5000000]
        [--batch-rows 20000] [--batches 5] [--repeats 2] [--providers windowstore,hdfs,rocksdb]
        [--driver-memory 6g]

The state-store level figures (put/commit per row, eviction, heap per entry) come from
`bench/windowstore/bench_ops.py` (sluice.windowstore.WindowStoreBenchmark, Scala, one JVM per repeat).
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sluice

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import Harness  # noqa: E402

PROVIDERS = {
    "windowstore": "sluice.windowstore.InMemoryWindowStoreProvider",
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}
PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"


def rows(spark: SparkSession, first: int, count: int, stride: int = 1, key_offset: int = 0):  # type: ignore[no-untyped-def]
    """`count` rows of ids first, first + stride, ...: window start (id % 1000) * 10 s, key id / 1000."""
    ident = F.col("id") * stride + first
    return spark.range(count).select(((ident % 1000) * 10).cast("timestamp").alias("ts"),
                                     (ident / 1000 + key_offset).cast("long").alias("k"))


def run_query(spark: SparkSession, work: Path, provider: str, live: int, batch_rows: int, batches: int) -> dict:
    """One fresh query: returns the batches' triggerExecution ms (after batch 0) and the state rows."""
    run_dir = Path(tempfile.mkdtemp(dir=work))
    src, ckpt = run_dir / "in", run_dir / "ckpt"
    rows(spark, 0, live).coalesce(1).write.parquet(str(src / "b0000"))
    spark.conf.set(PROVIDER_KEY, PROVIDERS[provider])
    try:
        q = (spark.readStream.schema("ts TIMESTAMP, k LONG").option("maxFilesPerTrigger", 1)
             .option("recursiveFileLookup", "true").parquet(str(src))
             .groupBy(F.window("ts", "10 seconds"), "k").count()
             .writeStream.outputMode("update").format("noop")
             .option("checkpointLocation", str(ckpt)).start())
    finally:
        spark.conf.unset(PROVIDER_KEY)
    q.processAllAvailable()
    times = []
    for i in range(1, batches + 1):
        half = batch_rows // 2
        updates = rows(spark, (i * 7919) % 1000, half, stride=max(1, live // half))
        new = rows(spark, live + i * batch_rows, half, key_offset=1_000_000)
        updates.union(new).coalesce(1).write.parquet(str(src / f"b{i:04d}"))  # one file: one batch
        q.processAllAvailable()
        times.append(q.lastProgress["durationMs"]["triggerExecution"])
    state_rows = q.lastProgress["stateOperators"][0]["numRowsTotal"]
    q.stop()
    shutil.rmtree(run_dir, ignore_errors=True)
    return {"median_batch_ms": statistics.median(times[1:]), "batch_ms": times, "state_rows": state_rows}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", type=int, default=50_000)
    ap.add_argument("--large", type=int, default=5_000_000)
    ap.add_argument("--batch-rows", type=int, default=20_000)
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--providers", default="windowstore,hdfs,rocksdb")
    ap.add_argument("--driver-memory", default="6g")
    args = ap.parse_args()
    providers = args.providers.split(",")
    sizes = {"small": args.small, "large": args.large}

    spark = sluice.configure(
        SparkSession.builder.master("local[2]").appName("bench-windowstore")
        .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
        .config("spark.driver.memory", args.driver_memory)
        .config("spark.ui.showConsoleProgress", "false")).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(tempfile.mkdtemp(prefix="bench-windowstore-"))
    try:
        h = Harness("windowstore_e2e", "windowed count end to end: median batch time per provider and state size",
                    {"live keys": sizes, "rows per batch": f"{args.batch_rows} (half updates, half new keys)",
                     "measured batches per run": args.batches - 1, "repeats": args.repeats,
                     "providers": {p: PROVIDERS[p] for p in providers},
                     "comparator": "the same query at the small state, and on the other providers listed (Spark "
                                   "defaults); 2 shuffle partitions, noop sink"})
        sides = [f"{p}@{s}" for p in providers for s in sizes]
        runs = h.alternating(
            sides, args.repeats,
            lambda side, i: run_query(spark, work, side.split("@")[0], sizes[side.split("@")[1]],
                                      args.batch_rows, args.batches),
            warmup=lambda side: run_query(spark, work, side.split("@")[0], 1000, 1000, 2)
            if side.endswith("@small") else None)
        med = {side: statistics.median(r["median_batch_ms"] for r in runs[side]) for side in sides}
        for p in providers:
            ratio = med[f"{p}@large"] / med[f"{p}@small"]
            if p == "windowstore":
                h.target("windowstore median batch large/small", ratio, "<=", 1.2)
            else:
                print(f"   {p} large/small (no target): {ratio:.2f}")
        for s in sizes:
            for p in providers:
                if p != "windowstore":
                    print(f"   {s}: {p}/windowstore median batch: {med[f'{p}@{s}'] / med[f'windowstore@{s}']:.2f}")
        h.write(medians_ms=med)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
