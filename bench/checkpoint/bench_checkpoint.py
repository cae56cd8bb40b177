"""Checkpoint files on the local file system, through bench/harness.py: the same streaming count with
`spark.sluice.checkpoint.local.direct` off (sluice's product default, measured first: Hadoop's local
file system writes Spark's checkpoint
files, starting a process per file) and on (sluice's checkpoint file manager writes them with
java.nio; an EXPERIMENTAL rewrite, opt-in), on Spark's HDFS-backed and RocksDB providers and sluice's
in-memory window store.

The query: `groupBy(k).count()` (the window store: by a 10-s window and k), update mode, noop sink,
a local checkpoint, `--partitions` shuffle partitions (Spark's default 200: one state store file
per partition and batch), `--batches` micro-batches of `--batch-rows` rows, one parquet file each.
Every batch after the first is measured: its `triggerExecution`, and the driver's two checkpoint
writes (`walCommit`, the offset log; `commitOffsets`, the commit log). The setting is read when the
SparkContext starts, so each run starts its own session (in one JVM: the sides alternate over the
repeats after one warm-up run per side).

Targets (README): on Spark's two providers, whose store files go through the checkpoint file manager,
median batch time on <= 0.9 x off; on every provider, the driver's two log writes per batch on <= 0.2 x
off. The window store writes its own files with java.nio whatever the setting (sluice.state.StoreFiles),
so only the two log files change there: its batch ratio is printed without a target. RocksDB uploads
its SST files with Hadoop's FileSystem API, not through the manager: those keep Hadoop's processes.

    .venv/bin/python bench/checkpoint/bench_checkpoint.py [--partitions 200] [--batch-rows 20000]
        [--batches 6] [--repeats 3] [--providers hdfs,rocksdb,windowstore]
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
from sluice._conf import state_store_providers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import Harness  # noqa: E402

PROVIDERS = {side: state_store_providers()[name]
             for side, name in (("hdfs", "hdfs"), ("rocksdb", "rocksdb"), ("windowstore", "in_memory_window"))}
PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"


def session(direct: bool, partitions: int) -> SparkSession:
    return sluice.configure(
        SparkSession.builder.master("local[2]").appName("bench-checkpoint")
        .config("spark.sql.shuffle.partitions", str(partitions)).config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g").config("spark.ui.showConsoleProgress", "false"),
        checkpoint_local_direct=direct).getOrCreate()


def run_query(work: Path, side: str, partitions: int, batch_rows: int, batches: int) -> dict:
    provider, setting = side.split("/")
    spark = session(setting == "on", partitions)
    spark.sparkContext.setLogLevel("ERROR")
    run_dir = Path(tempfile.mkdtemp(dir=work))
    src, ckpt = run_dir / "in", run_dir / "ckpt"
    try:
        spark.conf.set(PROVIDER_KEY, PROVIDERS[provider])
        for i in range(batches):  # one file per batch, all there before the start
            (spark.range(batch_rows).select((F.col("id") % 1000 * 10).cast("timestamp").alias("ts"),
                                            ((F.col("id") * 7 + i * 13) % 50_000).alias("k"))
             .coalesce(1).write.parquet(str(src / f"b{i:04d}")))
        events = (spark.readStream.schema("ts TIMESTAMP, k LONG").option("maxFilesPerTrigger", 1)
                  .option("recursiveFileLookup", "true").parquet(str(src)))
        keys = [F.window("ts", "10 seconds"), "k"] if provider == "windowstore" else ["k"]
        q = (events.groupBy(*keys).count().writeStream.outputMode("update").format("noop")
             .option("checkpointLocation", str(ckpt)).start())
        q.processAllAvailable()
        progress = [p for p in q.recentProgress if p["numInputRows"] > 0][1:]
        q.stop()
        ms = [p["durationMs"] for p in progress]
        crc = sum(1 for f in ckpt.rglob("*.crc"))
        return {"median_batch_ms": statistics.median(d["triggerExecution"] for d in ms),
                "median_log_writes_ms": statistics.median(d.get("walCommit", 0) + d.get("commitOffsets", 0) for d in ms),
                "batches": len(ms), "checksum_files": crc,
                "batch_ms": [d["triggerExecution"] for d in ms]}
    finally:
        spark.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=200)
    ap.add_argument("--batch-rows", type=int, default=20_000)
    ap.add_argument("--batches", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--providers", default="hdfs,rocksdb,windowstore")
    args = ap.parse_args()
    providers = args.providers.split(",")
    work = Path(tempfile.mkdtemp(prefix="bench-checkpoint-"))
    try:
        h = Harness("checkpoint_local", "Spark's checkpoint files on the local file system: Hadoop's local "
                    "file system (off, sluice's product default) vs sluice's java.nio checkpoint file manager "
                    "(on, experimental)",
                    {"query": "groupBy(k).count() (windowstore: window(ts, 10 s), k), update mode, noop sink, "
                              "local[2], spark.driver.memory 2g, checkpoint on the local disk",
                     "shuffle partitions": args.partitions, "rows per batch": args.batch_rows,
                     "measured batches per run": args.batches - 1, "repeats": args.repeats,
                     "providers": {p: PROVIDERS[p] for p in providers},
                     "sides": "<provider>/off: sluice's product defaults (no spark.sluice.* key set); "
                              "<provider>/on: spark.sluice.checkpoint.local.direct=true (experimental, opt-in)",
                     "comparator": "the same query with spark.sluice.checkpoint.local.direct=false (Spark's "
                                   "FileContext checkpoint file manager over Hadoop's local file system, no "
                                   "native Hadoop library, as pyspark ships)"})
        sides = [f"{p}/{s}" for p in providers for s in ("off", "on")]
        runs = h.alternating(
            sides, args.repeats,
            lambda side, i: run_query(work, side, args.partitions, args.batch_rows, args.batches),
            warmup=lambda side: run_query(work, side, args.partitions, 1000, 3))
        med = {side: {k: statistics.median(r[k] for r in runs[side]) for k in ("median_batch_ms", "median_log_writes_ms")}
               for side in sides}
        for p in providers:
            off, on = med[f"{p}/off"], med[f"{p}/on"]
            ratio = on["median_batch_ms"] / off["median_batch_ms"]
            if p == "windowstore":
                print(f"   {p}: median batch on/off (no target: only the two log files change): {ratio:.3f}")
            else:
                h.target(f"{p}: median batch on/off", ratio, "<=", 0.9)
            h.target(f"{p}: offset + commit log writes per batch on/off",
                     on["median_log_writes_ms"] / max(off["median_log_writes_ms"], 1), "<=", 0.2)
        h.write(medians=med)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
