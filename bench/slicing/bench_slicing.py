"""Window slicing (spark.sluice.window.slicing, an EXPERIMENTAL rewrite: off in sluice's product
defaults, opt-in): a streaming sliding-window aggregation drained without it (the product default,
measured first) and with it, in one SparkSession, the sides alternating.

    .venv/bin/python bench/slicing/bench_slicing.py [--events 2000000] [--keys 1000] [--reps 3]

The input: Parquet files of (ts, key, v), `--rate` events per second of event time over `--keys`
keys, one file per `--files` share of the stream in event-time order; the query reads two files per
micro-batch. Each case is a window size and slide (q5's 10 s every 2 s: five windows a row; a minute
every second: sixty). The query: watermark 10 s, groupBy(window, key).agg(count, sum(v), max(v)),
Spark's append mode into the noop sink, a fresh checkpoint each run, the in-memory window store.
Time: start() to processAllAvailable() returning (every batch, the state store's commits included).
Parquet rather than JSON keeps the input's decoding out of what is compared.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from pyspark.sql import SparkSession, functions as F  # noqa: E402

from support.session import BASE_CONF, fresh_builder, stop_session  # noqa: E402
import sluice  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import Harness  # noqa: E402

SLICING_KEY = "spark.sluice.window.slicing"
CASES = {"10s/2s": ("10 seconds", "2 seconds"), "60s/1s": ("60 seconds", "1 second")}


def session() -> SparkSession:
    stop_session()
    b = fresh_builder().master("local[2]").appName("sluice-bench-slicing")
    for k, v in {**BASE_CONF, "spark.driver.memory": "4g", "spark.sql.shuffle.partitions": "2",
                 "spark.ui.enabled": "false"}.items():
        b = b.config(k, v)
    return sluice.configure(b, state_store="in_memory_window").getOrCreate()


def write_input(spark: SparkSession, root: Path, events: int, keys: int, rate: int, files: int) -> Path:
    """`files` Parquet files in event-time order, dated in that order (the file source takes the oldest first)."""
    src = root / "in"
    per = events // files
    for f in range(files):
        part = root / f"part{f}"
        (spark.range(f * per, (f + 1) * per, numPartitions=1)
         .select((F.col("id") / rate).cast("timestamp").alias("ts"),
                 (F.hash("id") % keys).alias("key"), (F.col("id") % 97).alias("v"))
         .write.parquet(str(part)))
        src.mkdir(exist_ok=True)
        [data] = list(part.glob("*.parquet"))
        target = src / f"{f:04d}.parquet"
        data.rename(target)
        os.utime(target, (1_700_000_000 + f, 1_700_000_000 + f))
    return src


def drain(spark: SparkSession, src: Path, case: str, sliced: bool) -> dict:
    size, slide = CASES[case]
    spark.conf.set(SLICING_KEY, str(sliced).lower())
    try:
        events = spark.readStream.schema("ts timestamp, key long, v long").option("maxFilesPerTrigger", 2).parquet(str(src))
        agg = (events.withWatermark("ts", "10 seconds").groupBy(F.window("ts", size, slide), "key")
               .agg(F.count("*").alias("n"), F.sum("v").alias("total"), F.max("v").alias("top")))
        with tempfile.TemporaryDirectory() as ckpt:
            t0 = time.monotonic()
            q = agg.writeStream.format("noop").outputMode("append").option("checkpointLocation", ckpt).start()
            q.processAllAvailable()
            seconds = time.monotonic() - t0
            progress = q.recentProgress
            plan = q._jsq.explainInternal(False)
            q.stop()
    finally:
        spark.conf.unset(SLICING_KEY)
    rows = sum(p["numInputRows"] for p in progress)
    # the map side, top down: sliced, a merge over the windows' Expand over the per-slice partial aggregation
    below = plan.split("Exchange", 1)[1]
    shape = [agg or "Expand" for agg, _ in
             re.findall(r"HashAggregate\(keys=\[[^\]]*\], functions=\[(partial|merge)_|(Expand) \[", below)]
    return {"drain_s": round(seconds, 3), "events_per_s": round(rows / seconds), "rows": rows,
            "batches": len([p for p in progress if p["numInputRows"] > 0]), "sliced_plan": shape == ["merge", "Expand", "partial"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--rate", type=int, default=10_000, help="events per second of event time")
    ap.add_argument("--files", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cases", default=",".join(CASES))
    a = ap.parse_args()
    cases = a.cases.split(",")
    spark = session()
    h = Harness("slicing", "a streaming sliding-window aggregation drained at sluice's product defaults (unsliced) "
                "and with the experimental window slicing", {
        "spark": f"Spark {spark.version} local[2], shuffle partitions 2, driver memory 4g, state store in_memory_window "
                 f"(sluice), append mode into the noop sink",
        "input": f"{a.events} events, {a.keys} keys, {a.rate} events/s of event time, {a.files} Parquet files, "
                 "2 files per micro-batch",
        "query": "withWatermark 10 s, groupBy(window(ts, size, slide), key).agg(count, sum(v), max(v))",
        "cases": {c: f"window {CASES[c][0]} every {CASES[c][1]}" for c in cases},
        "sides": "unsliced (sluice's product default: spark.sluice.window.slicing unset, Spark's plan) / sliced "
                 "(spark.sluice.window.slicing=true, experimental, opt-in)",
        "time": "start() to processAllAvailable() returning",
    })
    with tempfile.TemporaryDirectory() as root:
        src = write_input(spark, Path(root), a.events, a.keys, a.rate, a.files)
        warm = write_input(spark, Path(root) / "warm", a.events // 10, a.keys, a.rate, 2)
        for case in cases:
            sides = [f"{case} unsliced", f"{case} sliced"]
            h.alternating(sides, a.reps, run=lambda side, i: drain(spark, src, case, side.endswith(" sliced")),
                          warmup=lambda side: drain(spark, warm, case, side.endswith(" sliced")))
            off = statistics.median(r["events_per_s"] for r in h.runs[sides[0]])
            on = statistics.median(r["events_per_s"] for r in h.runs[sides[1]])
            print(f"   {case}: median events/s unsliced {off:.0f}, sliced {on:.0f}")
            assert all(r["sliced_plan"] for r in h.runs[sides[1]]) and not any(r["sliced_plan"] for r in h.runs[sides[0]]), \
                "a run's plan is not the side's"
            h.target(f"{case}: sliced / unsliced drain throughput", on / off, ">=", 1.0)
    h.write()
    stop_session()


if __name__ == "__main__":
    main()
