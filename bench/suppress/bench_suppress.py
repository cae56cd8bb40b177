"""suppress benchmarks; each case prints its figures side by side and its target, met or missed.

throughput: a windowed count with and without suppress(until_window_closes) (the suppress operator,
    fusion off), the same N events (K users, increasing event time) in F parquet files, one file
    per micro-batch, to a noop sink; the two queries alternate for R rounds and the best round of
    each is compared (>= 0.8x).
fused: the same input through update mode + unbounded until_window_closes fused into the
    aggregation, vs Spark's append and plain update modes (three cases rotating, one warm-up):
    throughput fused/append and fused/update (>= 0.95x) and state memory fused/append (<= 1.1x).
held: a per-user count under until_time_limit(10 years) (nothing ever due), with H keys held and
    10k of them updated per batch: the median batch time with many keys held over the one with
    few (<= 1.3x), per state store provider (in-memory window store, RocksDB).
release: one batch releasing 1M due windows (own JVM, small young generation, GC log): the
    largest heap after a GC during the batch minus the heap before it, over the released rows'
    bytes (<= 2x). `--case all` runs it last, in a subprocess.
bounded: one batch of ~100 MB of updates into a 10 MB max_bytes buffer (one partition): the
    largest in-memory size ever reached (suppressionBufferBytesMax) over the bound (<= 1.1x), for
    emit-early and spill-to-disk.

    .venv/bin/python bench/suppress/bench_suppress.py [--case all|throughput|fused|held|bounded]
        [--rows 2000000] [--files 20] [--rounds 3]                       (throughput, fused)
        [--held 10000,5000000] [--updates 10000] [--batches 6] [--repeats 2]
        [--providers windowstore,rocksdb]                                (held)
        [--bound-mb 10] [--updates-mb 100]                               (bounded)
        [--release-rows 1000000]                                         (release)
"""
from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import sluice
from sluice import BufferConfig, Suppressed, suppress

PROVIDERS = {
    "windowstore": "sluice.windowstore.InMemoryWindowStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
}
TEN_YEARS_S = 10 * 365 * 24 * 3600


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


def throughput(spark: SparkSession, work: Path, args: argparse.Namespace) -> None:
    spark.conf.set(FUSED_KEY, "false")  # this case measures the suppress operator's buffer
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
    ratio = supp_rate / plain_rate
    print(f"throughput ratio suppress/plain: {ratio:.2f} (target >= 0.8: {'met' if ratio >= 0.8 else 'missed'})")


def user_file(spark: SparkSession, path: Path, ids: DataFrame, second: int) -> None:
    """One input file: a row per id (user = zero-padded id) at event time T0 + `second`."""
    (ids.select(F.lit(1_700_000_000 + second).cast("timestamp").alias("ts"),
                F.format_string("user%010d", F.col("id")).alias("user"))
     .coalesce(1).write.mode("overwrite").parquet(str(path)))


def per_user_limited(spark: SparkSession, src: Path, cfg: BufferConfig, with_suppress: bool = True) -> DataFrame:
    events = (spark.readStream.schema("ts timestamp, user string").option("maxFilesPerTrigger", 1)
              .option("recursiveFileLookup", "true").parquet(str(src)))
    table = events.groupBy("user").agg(F.max("ts").alias("ts"), F.count("*").alias("n"))
    if not with_suppress:
        return table
    return suppress(table, Suppressed.until_time_limit(TEN_YEARS_S, cfg), time_col="ts")


def held(spark: SparkSession, work: Path, args: argparse.Namespace) -> None:
    sizes = [int(x) for x in args.held.split(",")]
    per_batch = args.updates
    print(f"held keys {' vs '.join(f'{h:,}' for h in sizes)}; {per_batch:,} of them updated per batch; "
          f"until_time_limit(10 years, unbounded), nothing due; {args.batches} measured batches x "
          f"{args.repeats} alternating repeats per size (the first batch after each start, which loads "
          f"the store, not counted); 2 shuffle partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    variants = [("suppress", True)] + ([("plain", False)] if args.baseline else [])
    for provider in args.providers.split(","):
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", PROVIDERS[provider])
        for variant, with_suppress in variants:
            times: dict[int, list[float]] = {h: [] for h in sizes}
            second = {h: 0 for h in sizes}
            files = {h: 0 for h in sizes}

            def run(h: int, measure: bool) -> None:
                src, ckpt = work / f"held-{provider}-{variant}-{h}", work / f"ckpt-held-{provider}-{variant}-{h}"
                df = per_user_limited(spark, src, BufferConfig.unbounded(), with_suppress)
                q = df.writeStream.format("noop").outputMode("update").option("checkpointLocation", str(ckpt)).start()
                q.processAllAvailable()
                durations = [p["durationMs"]["triggerExecution"] for p in q.recentProgress if p["numInputRows"] > 0]
                q.stop()
                if measure:
                    times[h].extend(durations[1:])

            def add(h: int, ids: DataFrame) -> None:
                second[h] += 1
                user_file(spark, work / f"held-{provider}-{variant}-{h}" / f"f{files[h]:05d}", ids, second[h])
                files[h] += 1

            t0 = time.perf_counter()
            for h in sizes:
                add(h, spark.range(0, h, numPartitions=2))
                run(h, measure=False)
            print(f"  [{provider}/{variant}] loaded in {time.perf_counter() - t0:.0f} s")
            for r in range(args.repeats):
                for h in (sizes if r % 2 == 0 else list(reversed(sizes))):
                    stride = max(1, h // per_batch)
                    for b in range(args.batches + 1):
                        offset = (r * (args.batches + 1) + b) % stride
                        add(h, spark.range(0, min(per_batch, h), numPartitions=1)
                            .select((F.col("id") * stride + offset).alias("id")))
                    run(h, measure=True)
            med = {h: statistics.median(times[h]) for h in sizes}
            line = ", ".join(f"{h:,} held: {med[h]:.0f} ms" for h in sizes)
            ratio = med[sizes[-1]] / med[sizes[0]]
            target = "" if variant == "plain" else f" (target <= 1.3: {'met' if ratio <= 1.3 else 'missed'})"
            print(f"{provider:11s} {variant:8s}: median batch {line}; ratio {ratio:.2f}{target}")
            print(f"  batch times ms: " + "; ".join(f"{h:,}: {sorted(int(x) for x in times[h])}" for h in sizes))
        spark.conf.unset("spark.sql.streaming.stateStore.providerClass")


def suppress_metrics(q) -> dict:
    return next(op["customMetrics"] for op in q.lastProgress["stateOperators"] if op["operatorName"] == "suppress")


def bounded(spark: SparkSession, work: Path, args: argparse.Namespace) -> None:
    bound = args.bound_mb * 1_000_000
    spark.conf.set("spark.sql.shuffle.partitions", "1")
    # One entry's size (key + value bytes as the buffer counts them): all users have the same width.
    probe_src = work / "bounded-probe"
    user_file(spark, probe_src / "f0", spark.range(0, 1), 1)
    q = (per_user_limited(spark, probe_src, BufferConfig.unbounded()).writeStream.format("noop")
         .outputMode("update").option("checkpointLocation", str(work / "ckpt-probe")).start())
    q.processAllAvailable()
    entry = suppress_metrics(q)["suppressionBufferBytes"]
    q.stop()
    rows = args.updates_mb * 1_000_000 // entry
    print(f"bounded buffer: max_bytes {bound:,} (one partition); one batch of {rows:,} new keys x {entry} bytes "
          f"= {rows * entry / 1e6:.0f} MB of updates")
    src = work / "bounded-in"
    user_file(spark, src / "f0", spark.range(0, rows, numPartitions=2), 1)
    for name, cfg in (("emit-early", BufferConfig.max_bytes(bound)),
                      ("spill-to-disk", BufferConfig.max_bytes(bound).spill_to_disk_when_full())):
        start = time.perf_counter()
        q = (per_user_limited(spark, src, cfg).writeStream.format("noop").outputMode("update")
             .option("checkpointLocation", str(work / f"ckpt-bounded-{name}")).start())
        q.processAllAvailable()
        elapsed = time.perf_counter() - start
        m = suppress_metrics(q)
        q.stop()
        ratio = m["suppressionBufferBytesMax"] / bound
        print(f"{name:13s}: largest in-memory size {m['suppressionBufferBytesMax']:,} bytes = {ratio:.4f}x the bound "
              f"(target <= 1.1: {'met' if ratio <= 1.1 else 'missed'}); after the batch {m['suppressionBufferBytes']:,} "
              f"in memory, {m['suppressionDiskBufferBytes']:,} on disk, {m['suppressionEvictTotal']:,} emitted early; "
              f"{elapsed:.1f} s")
    spark.conf.set("spark.sql.shuffle.partitions", "2")


GC_LINE = re.compile(r"^\[(\d+\.\d+)s\].*Pause (?:Young|Full).* (\d+)M->(\d+)M\(\d+M\)")


def release(spark: SparkSession, work: Path, args: argparse.Namespace) -> None:
    """Heap growth while one batch releases many due rows (RocksDB state): the largest heap in use
    after a GC during the batch (small young generation, so GCs are frequent; an upper bound of
    what is live, as old garbage counts until a mixed GC) minus the heap after a full GC just before it. Rows streamed out keep it flat; rows collected first grow it by their size."""
    n = args.release_rows
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    # RocksDB keeps state off the heap: what grows on the heap is the operators' own.
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", PROVIDERS["rocksdb"])
    src = work / "release-in"
    user_file(spark, src / "f0", spark.range(0, n, numPartitions=2), 1)     # n windows buffered
    user_file(spark, src / "f1", spark.range(n, n + 1), 3600)               # moves the watermark
    events = (spark.readStream.schema("ts timestamp, user string").option("maxFilesPerTrigger", 1)
              .option("recursiveFileLookup", "true").parquet(str(src)))
    counts = events.withWatermark("ts", "0 seconds").groupBy(F.window("ts", "1 minute"), "user").count()
    final = suppress(counts, Suppressed.until_window_closes(BufferConfig.unbounded()))
    q = (final.writeStream.format("noop").outputMode("update")
         .option("checkpointLocation", str(work / "ckpt-release")).start())
    q.processAllAvailable()
    held_bytes = sum(op["customMetrics"]["suppressionBufferBytes"]
                     for op in q.lastProgress["stateOperators"] if op["operatorName"] == "suppress")
    jvm = spark.sparkContext._jvm
    mx = jvm.java.lang.management.ManagementFactory
    jvm.java.lang.System.gc()
    base = mx.getMemoryMXBean().getHeapMemoryUsage().getUsed()
    start_s = mx.getRuntimeMXBean().getUptime() / 1000
    user_file(spark, src / "f2", spark.range(n + 1, n + 2), 3601)           # its batch closes all n windows
    q.processAllAvailable()
    end_s = mx.getRuntimeMXBean().getUptime() / 1000
    emitted = sum(op["customMetrics"]["suppressionEmitTotal"]
                  for op in q.lastProgress["stateOperators"] if op["operatorName"] == "suppress")
    q.stop()
    after = [int(m.group(3)) * 1024 * 1024 for line in open(args.gc_log)
             if (m := GC_LINE.match(line)) and start_s <= float(m.group(1)) <= end_s]
    growth = max(after, default=base) - base
    ratio = growth / held_bytes
    print(f"release: one batch releases {emitted:,} due rows ({held_bytes / 1e6:.1f} MB as buffered); "
          f"{len(after)} GCs during it; largest heap after a GC minus the heap before: {growth / 1e6:.1f} MB "
          f"= {ratio:.2f}x the released bytes (target <= 2: {'met' if ratio <= 2 else 'missed'})")


# --- fused final results: fused until_window_closes vs Spark's append and update modes ---

FUSED_KEY = "spark.sluice.suppress.fused"
FUSED_CASES = ("fused", "append", "update")
FUSED_TARGETS = {"fused/append throughput": (">=", 0.95), "fused/update throughput": (">=", 0.95),
                 "fused/append state memory": ("<=", 1.1)}


def run_fused_case(spark: SparkSession, src: Path, case: str, ckpt: Path) -> dict[str, float]:
    """One query over the input: `fused` = update mode + unbounded until_window_closes with fusion
    on; `append` / `update` = the plain windowed count in that output mode. Returns seconds, rows
    emitted, stateful operator names and peak state memory (memoryUsedBytes summed over the
    operators of a batch, largest over the batches)."""
    events = (spark.readStream.schema("ts timestamp, user string").option("maxFilesPerTrigger", 1)
              .option("recursiveFileLookup", "true").parquet(str(src)))
    counts = events.withWatermark("ts", "10 seconds").groupBy(F.window("ts", "1 minute"), "user").count()
    out = suppress(counts, Suppressed.until_window_closes(BufferConfig.unbounded())) if case == "fused" else counts
    spark.conf.set(FUSED_KEY, "true")
    start = time.perf_counter()
    q = (out.writeStream.format("noop").outputMode("append" if case == "append" else "update")
         .option("checkpointLocation", str(ckpt)).start())
    q.processAllAvailable()
    elapsed = time.perf_counter() - start
    progress = q.recentProgress
    q.stop()
    spark.conf.unset(FUSED_KEY)
    return {"seconds": elapsed,
            "emitted": sum(p["sink"]["numOutputRows"] for p in progress if p["sink"]["numOutputRows"] > 0),
            "operators": sorted({op["operatorName"] for p in progress for op in p["stateOperators"]}),
            "state_bytes": max((sum(op["memoryUsedBytes"] for op in p["stateOperators"]) for p in progress),
                               default=0)}


def bench_fused(spark: SparkSession, src: Path, work: Path, rows: int, rounds: int) -> None:
    """Alternates the three cases (the order rotates every round, after one uncounted warm-up run),
    then compares each case's best and median round."""
    results: dict[str, list[dict[str, float]]] = {c: [] for c in FUSED_CASES}
    run_fused_case(spark, src, "fused", work / "ckpt-fused-section-warmup")  # JIT warm-up, not counted
    for r in range(rounds):
        order = FUSED_CASES[r % 3:] + FUSED_CASES[:r % 3]
        for case in order:
            res = run_fused_case(spark, src, case, work / f"ckpt-fused-section-{case}-{r}")
            results[case].append(res)
            print(f"round {r} {case:7s}: {res['seconds']:6.2f} s, {rows / res['seconds']:10.0f} rows/s, "
                  f"{res['emitted']} rows emitted, state peak {res['state_bytes'] / 1e6:.2f} MB, "
                  f"operators {res['operators']}")
    assert results["fused"][0]["operators"] == ["stateStoreSave"], "the suppress operator was not fused"
    assert results["fused"][0]["emitted"] == results["append"][0]["emitted"], "fused and append emit different rows"

    def rate(case: str, pick: str) -> float:
        secs = sorted(x["seconds"] for x in results[case])
        return rows / (secs[0] if pick == "best" else statistics.median(secs))

    state = {c: max(x["state_bytes"] for x in results[c]) for c in FUSED_CASES}
    print(f"\n{'case':7s} {'best rows/s':>12s} {'median rows/s':>14s} {'emitted':>8s} {'state peak':>11s}")
    for c in FUSED_CASES:
        print(f"{c:7s} {rate(c, 'best'):12.0f} {rate(c, 'median'):14.0f} {results[c][0]['emitted']:8d} "
              f"{state[c] / 1e6:9.2f} MB")
    for pick in ("best", "median"):
        ratios = {"fused/append throughput": rate("fused", pick) / rate("append", pick),
                  "fused/update throughput": rate("fused", pick) / rate("update", pick),
                  "fused/append state memory": state["fused"] / state["append"]}
        for name, value in ratios.items():
            op, target = FUSED_TARGETS[name]
            met = value >= target if op == ">=" else value <= target
            print(f"{pick:6s} {name:26s}: {value:5.2f} (target {op} {target}) {'met' if met else 'MISSED'}")


def fused(spark: SparkSession, work: Path, args: argparse.Namespace) -> None:
    src = work / "in-fused"
    make_input(spark, src, args.rows, args.files, args.users, args.events_per_second)
    bench_fused(spark, src, work, args.rows, args.rounds)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default="all", choices=["all", "throughput", "fused", "held", "bounded", "release"])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--users", type=int, default=2_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--events-per-second", type=int, default=1000)
    ap.add_argument("--held", default="10000,5000000", help="held key counts, few first")
    ap.add_argument("--updates", type=int, default=10_000, help="keys updated per batch")
    ap.add_argument("--batches", type=int, default=6, help="measured batches per run")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--providers", default="windowstore,rocksdb")
    ap.add_argument("--baseline", action="store_true", help="also the aggregation without suppress")
    ap.add_argument("--bound-mb", type=int, default=10)
    ap.add_argument("--updates-mb", type=int, default=100)
    ap.add_argument("--release-rows", type=int, default=1_000_000)
    ap.add_argument("--driver-memory", default="6g")
    ap.add_argument("--gc-log", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.case == "release" and args.gc_log is None:
        # Its own JVM: a small young generation (frequent GCs to sample the heap) and a GC log.
        with tempfile.NamedTemporaryFile(prefix="bench-suppress-gc-", suffix=".log", delete=False) as f:
            args.gc_log = f.name

    builder = (SparkSession.builder.master("local[2]").appName("bench-suppress")
               .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
               .config("spark.driver.memory", args.driver_memory)
               .config("spark.sql.streaming.numRecentProgressUpdates", "1000")
               # Providers of stopped runs are unloaded (and their memory freed) at maintenance.
               .config("spark.sql.streaming.stateStore.maintenanceInterval", "5s")
               .config("spark.ui.showConsoleProgress", "false"))
    if args.gc_log:
        builder = builder.config("spark.driver.extraJavaOptions", f"-Xmn64m -Xlog:gc:file={args.gc_log}:uptime")
    spark = sluice.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(tempfile.mkdtemp(prefix="bench-suppress-"))
    try:
        for case, fn in (("throughput", throughput), ("fused", fused), ("held", held), ("bounded", bounded),
                         ("release", release)):
            if args.case == case or (args.case == "all" and case != "release"):
                print(f"\n== {case} ==")
                fn(spark, work, args)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    if args.case == "all":
        print("\n== release ==", flush=True)
        subprocess.run([sys.executable, __file__, "--case", "release", "--release-rows", str(args.release_rows),
                        "--driver-memory", args.driver_memory], check=True)


if __name__ == "__main__":
    main()
