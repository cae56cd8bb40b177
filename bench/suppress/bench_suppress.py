"""Throughput of a windowed count with and without suppress(until_window_closes), same input.

Writes N events (K users, increasing event time) as F parquet files once, then runs each query
over them, one file per micro-batch, to a noop sink; alternates the two queries for R rounds and
reports the best round of each. Prints rows/s of both, their ratio and rows emitted by each.

    .venv/bin/python bench/suppress/bench_suppress.py [--rows 2000000] [--files 20] [--rounds 2]
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sluice
from sluice import BufferConfig, Suppressed, suppress


def make_input(spark: SparkSession, path: Path, rows: int, files: int, users: int, rate: int) -> None:
    per_file = rows // files
    for i in range(files):
        (spark.range(i * per_file, (i + 1) * per_file, numPartitions=1)
         # `rate` events per second of event time: each file spans per_file/rate seconds.
         .select((F.lit(1_700_000_000) + F.col("id") / rate).cast("timestamp").alias("ts"),
                 (F.col("id") * 7919 % users).cast("string").alias("user"))
         .write.mode("append").parquet(str(path / f"part-{i:04d}")))


def run_once(spark: SparkSession, src: Path, files: int, with_suppress: bool, ckpt: Path) -> tuple[float, int]:
    events = (spark.readStream.schema("ts timestamp, user string").option("maxFilesPerTrigger", 1)
              .option("recursiveFileLookup", "true").parquet(str(src)))
    counts = events.withWatermark("ts", "10 seconds").groupBy(F.window("ts", "1 minute"), "user").count()
    out = suppress(counts, Suppressed.until_window_closes(BufferConfig.unbounded())) if with_suppress else counts
    start = time.perf_counter()
    q = (out.writeStream.format("noop").outputMode("update").option("checkpointLocation", str(ckpt)).start())
    q.processAllAvailable()
    elapsed = time.perf_counter() - start
    emitted = sum(p["sink"]["numOutputRows"] for p in q.recentProgress if p["sink"]["numOutputRows"] > 0)
    q.stop()
    return elapsed, emitted


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--users", type=int, default=2_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--events-per-second", type=int, default=1000)
    args = ap.parse_args()

    builder = (SparkSession.builder.master("local[2]").appName("bench-suppress")
               .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
               .config("spark.driver.memory", "2g")
               .config("spark.sql.streaming.numRecentProgressUpdates", "1000")
               .config("spark.ui.showConsoleProgress", "false"))
    spark = sluice.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(tempfile.mkdtemp(prefix="bench-suppress-"))
    try:
        src = work / "in"
        make_input(spark, src, args.rows, args.files, args.users, args.events_per_second)
        best: dict[str, tuple[float, int]] = {}
        for r in range(args.rounds):
            for name, flag in (("plain", False), ("suppress", True)):
                elapsed, emitted = run_once(spark, src, args.files, flag, work / f"ckpt-{name}-{r}")
                print(f"round {r} {name:8s}: {elapsed:6.2f} s, {args.rows / elapsed:10.0f} rows/s, {emitted} rows emitted")
                if name not in best or elapsed < best[name][0]:
                    best[name] = (elapsed, emitted)
        plain_rate = args.rows / best["plain"][0]
        supp_rate = args.rows / best["suppress"][0]
        print(f"\ninput: {args.rows} rows, {args.files} micro-batches, {args.users} users, "
              f"{args.events_per_second} events/s of event time, 1-minute windows, 10 s watermark delay")
        print(f"plain aggregation (update mode): {plain_rate:10.0f} rows/s, {best['plain'][1]} rows emitted")
        print(f"with until_window_closes       : {supp_rate:10.0f} rows/s, {best['suppress'][1]} rows emitted")
        print(f"throughput ratio suppress/plain: {supp_rate / plain_rate:.2f} (target >= 0.8)")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
