"""suppress benchmarks, each case through bench/harness.py: settings printed first, one warm-up
run per side, repeats with the sides alternating, targets printed met/missed, and one result file
per case in bench/results/ (suppress_<case>-<time>.json).

throughput: a windowed count with and without suppress(until_window_closes) (the suppress operator,
    fusion off), the same N events (K users, increasing event time) in F parquet files, one file
    per micro-batch, to a noop sink; the two queries alternate for R rounds and the median round of
    each is compared (>= 0.8x).
sessions: a session-window count's final results, update mode + suppress(until_window_closes) as
    a user writes it (fused, the default) vs Spark's append mode, same input, sides alternating:
    throughput (>= 0.95x) and state memory (<= 1.1x); the unfused plan printed beside, no target.
fused: the same input through update mode + unbounded until_window_closes fused into the
    aggregation, vs Spark's append and plain update modes (three sides alternating):
    throughput fused/append and fused/update (>= 0.95x) and state memory fused/append (<= 1.1x).
held: a per-user count under until_time_limit(10 years) (nothing ever due), with H keys held and
    10k of them updated per batch: the median batch time with many keys held over the one with
    few (<= 1.3x), per state store provider (in-memory window store, RocksDB).
release: one batch releasing 1M due windows (own JVM, small young generation, GC log): the
    largest heap after a GC during the batch minus the heap before it, over the released rows'
    bytes (<= 2x). `--case all` runs it last, in a subprocess.
grace: a 1-minute windowed count with a 10-minute watermark delay, its finals by
    until_window_closes without a grace (the watermark closes windows) and with a grace of 0 and
    of 1 minute, the same input (E events/s of event time, one 10-second file per micro-batch) for
    each and a last file a day later that closes every window, sides alternating: how far past a
    window's end stream time (the largest event time read through the emitting batch) is when its
    final leaves, p50/p99, and throughput; every side's finals must be the same. Targets: grace 0 p99 <= 1/10 of the watermark's p50, throughput >= 0.95x.
late: the grace case's query with a grace of 1 minute, 1 % of its records 5 minutes behind (late:
    their windows closed), late records counted (the default) vs kept as parquet
    (with_late_records), sides alternating: throughput (kept >= 0.95x counted); both sides' finals
    must be the same and the kept records as many as the counted side's lateRecordDropTotal.
bounded: one batch of ~100 MB of updates into a 10 MB max_bytes buffer (one partition): the
    largest in-memory size ever reached (suppressionBufferBytesMax) over the bound (<= 1.1x), for
    emit-early and spill-to-disk.

    .venv/bin/python bench/suppress/bench_suppress.py [--case all|throughput|fused|sessions|grace|late|held|bounded|release]
        [--rows 2000000] [--files 20] [--rounds 3]                       (throughput, fused, sessions)
        [--held 10000,5000000] [--updates 10000] [--batches 6] [--repeats 2]
        [--providers windowstore,rocksdb]                                (held)
        [--bound-mb 10] [--updates-mb 100]                               (bounded)
        [--release-rows 1000000]                                         (release)
        [--grace-minutes 20] [--events-per-second 1000]                  (grace, late)
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
from datetime import datetime, timedelta
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import sluice
from sluice import BufferConfig, Suppressed, suppress

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import Harness  # noqa: E402

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
    h = Harness("suppress_throughput", "windowed count without (plain) and with suppress(until_window_closes)",
                {"rows": args.rows, "micro-batches": args.files, "users": args.users,
                 "event time": f"{args.events_per_second} events/s, 1-minute windows, 10 s watermark delay",
                 "comparator": "the same aggregation in update mode, no suppress; 2 shuffle partitions, "
                               "default state store (HDFS-backed), noop sink", "rounds": args.rounds})

    def run(side: str, i: int) -> dict:
        elapsed, emitted = run_once(spark, src, args.files, side == "suppress", work / f"ckpt-{side}-{i}")
        return {"seconds": elapsed, "rows_per_s": args.rows / elapsed, "emitted": emitted}

    runs = h.alternating(["plain", "suppress"], args.rounds, run,
                         warmup=lambda side: run(side, -1))
    rate = {side: statistics.median(r["rows_per_s"] for r in runs[side]) for side in runs}
    h.target("median throughput suppress/plain", rate["suppress"] / rate["plain"], ">=", 0.8)
    h.write()


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
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    variants = [("suppress", True)] + ([("plain", False)] if args.baseline else [])
    for provider in args.providers.split(","):
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", PROVIDERS[provider])
        for variant, with_suppress in variants:
            h = Harness(f"suppress_held_{provider}_{variant}",
                        "median batch time with many keys held over the one with few",
                        {"held keys": sizes, "keys updated per batch": per_batch,
                         "suppress": "until_time_limit(10 years, unbounded), nothing due" if with_suppress
                         else "none (the aggregation alone)", "provider": PROVIDERS[provider],
                         "measured batches per run": args.batches, "repeats": args.repeats,
                         "not counted": "the first batch after each start (it loads the store)",
                         "comparator": f"the same query holding {sizes[0]:,} keys", "shuffle partitions": 2})
            second = {n: 0 for n in sizes}
            files = {n: 0 for n in sizes}

            def add(n: int, ids: DataFrame) -> None:
                second[n] += 1
                user_file(spark, work / f"held-{provider}-{variant}-{n}" / f"f{files[n]:05d}", ids, second[n])
                files[n] += 1

            def query(n: int) -> list[float]:
                src, ckpt = work / f"held-{provider}-{variant}-{n}", work / f"ckpt-held-{provider}-{variant}-{n}"
                df = per_user_limited(spark, src, BufferConfig.unbounded(), with_suppress)
                q = df.writeStream.format("noop").outputMode("update").option("checkpointLocation", str(ckpt)).start()
                q.processAllAvailable()
                durations = [p["durationMs"]["triggerExecution"] for p in q.recentProgress if p["numInputRows"] > 0]
                q.stop()
                return durations[1:]

            def warmup(side: str) -> None:  # loads the held keys
                n = int(side)
                add(n, spark.range(0, n, numPartitions=2))
                query(n)

            def run(side: str, r: int) -> dict:
                n = int(side)
                stride = max(1, n // per_batch)
                for b in range(args.batches + 1):
                    offset = (r * (args.batches + 1) + b) % stride
                    add(n, spark.range(0, min(per_batch, n), numPartitions=1)
                        .select((F.col("id") * stride + offset).alias("id")))
                times = query(n)
                return {"median_batch_ms": statistics.median(times), "batch_ms": times}

            runs = h.alternating([str(n) for n in sizes], args.repeats, run, warmup=warmup)
            med = {n: statistics.median(t for r in runs[str(n)] for t in r["batch_ms"]) for n in sizes}
            ratio = med[sizes[-1]] / med[sizes[0]]
            if with_suppress:
                h.target(f"median batch {sizes[-1]:,} held / {sizes[0]:,} held", ratio, "<=", 1.3)
            else:
                print(f"   ratio (no target): {ratio:.2f}")
            h.write(medians_ms=med)
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
    src = work / "bounded-in"
    user_file(spark, src / "f0", spark.range(0, rows, numPartitions=2), 1)
    cfgs = {"emit-early": BufferConfig.max_bytes(bound),
            "spill-to-disk": BufferConfig.max_bytes(bound).spill_to_disk_when_full()}
    h = Harness("suppress_bounded", "largest in-memory size of a bounded buffer over its bound",
                {"max_bytes": bound, "shuffle partitions": 1, "batch": f"{rows:,} new keys x {entry} bytes",
                 "repeats": args.repeats, "comparator": "the bound itself (a memory figure: no timing)"})

    def run(side: str, i: int) -> dict:
        q = (per_user_limited(spark, src, cfgs[side]).writeStream.format("noop").outputMode("update")
             .option("checkpointLocation", str(work / f"ckpt-bounded-{side}-{i}")).start())
        q.processAllAvailable()
        m = suppress_metrics(q)
        q.stop()
        return {k: m[k] for k in ("suppressionBufferBytesMax", "suppressionBufferBytes",
                                  "suppressionDiskBufferBytes", "suppressionEvictTotal")}

    runs = h.alternating(list(cfgs), args.repeats, run)
    for side in cfgs:
        h.target(f"{side}: largest in-memory size / bound",
                 max(r["suppressionBufferBytesMax"] for r in runs[side]) / bound, "<=", 1.1)
    h.write()
    spark.conf.set("spark.sql.shuffle.partitions", "2")


GC_LINE = re.compile(r"^\[(\d+\.\d+)s\].*Pause (?:Young|Full).* (\d+)M->(\d+)M\(\d+M\)")


def release(spark: SparkSession, work: Path, args: argparse.Namespace) -> None:
    """Heap growth while one batch releases many due rows (RocksDB state): the largest heap in use
    after a GC during the batch (small young generation, so GCs are frequent; an upper bound of
    what is live, as old garbage counts until a mixed GC) minus the heap after a full GC just before it. Rows streamed out keep it flat; rows collected first grow it by their size."""
    n = args.release_rows
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    # The suppress operator's own buffer is what is measured: a fused plan has none (the
    # aggregation's state-save emits the windows).
    spark.conf.set(FUSED_KEY, "false")
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
    if not held_bytes:
        raise RuntimeError("no suppress buffer held the windows: is the plan fused?")
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
    h = Harness("suppress_release", "heap growth while one batch releases many due rows",
                {"due rows": n, "state store": PROVIDERS["rocksdb"], "JVM": "-Xmn64m, GC log",
                 "comparator": "the released rows' bytes as buffered (a memory figure, one run: no sides)"})
    h.runs["release"] = [{"emitted": emitted, "held_bytes": held_bytes, "gcs": len(after), "growth_bytes": growth}]
    print(f"   release: {emitted:,} rows ({held_bytes / 1e6:.1f} MB buffered), {len(after)} GCs, "
          f"growth {growth / 1e6:.1f} MB")
    h.target("heap growth / released bytes", growth / held_bytes, "<=", 2)
    h.write()


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
    elapsed, progress = run_to_end(
        out.writeStream.format("noop").outputMode("append" if case == "append" else "update"), ckpt)
    spark.conf.unset(FUSED_KEY)
    return {"seconds": elapsed,
            "emitted": sum(p["sink"]["numOutputRows"] for p in progress if p["sink"]["numOutputRows"] > 0),
            **state_figures(progress)}


def run_to_end(writer, ckpt: Path) -> tuple[float, list]:
    """Starts `writer` on checkpoint `ckpt` and runs it over all its input: the seconds it took and
    its progress."""
    start = time.perf_counter()
    q = writer.option("checkpointLocation", str(ckpt)).start()
    q.processAllAvailable()
    elapsed = time.perf_counter() - start
    progress = q.recentProgress
    q.stop()
    return elapsed, progress


def state_figures(progress: list) -> dict:
    """The stateful operators' names and peak state memory (memoryUsedBytes summed over the
    operators of a batch, largest over the batches)."""
    return {"operators": sorted({op["operatorName"] for p in progress for op in p["stateOperators"]}),
            "state_bytes": max((sum(op["memoryUsedBytes"] for op in p["stateOperators"]) for p in progress),
                               default=0)}


def bench_fused(spark: SparkSession, src: Path, work: Path, rows: int, rounds: int) -> None:
    h = Harness("suppress_fused", "fused until_window_closes vs Spark's append and update modes",
                {"rows": rows, "comparators": "the plain windowed count in append mode and in update mode, "
                 "default state store, 2 shuffle partitions, noop sink", "rounds": rounds})
    runs = h.alternating(list(FUSED_CASES), rounds,
                         lambda case, i: run_fused_case(spark, src, case, work / f"ckpt-fused-{case}-{i}"),
                         warmup=lambda case: run_fused_case(spark, src, case, work / f"ckpt-fused-{case}-warmup"))
    assert runs["fused"][0]["operators"] == ["stateStoreSave"], "the suppress operator was not fused"
    assert runs["fused"][0]["emitted"] == runs["append"][0]["emitted"], "fused and append emit different rows"
    rate = {c: rows / statistics.median(x["seconds"] for x in runs[c]) for c in FUSED_CASES}
    state = {c: max(x["state_bytes"] for x in runs[c]) for c in FUSED_CASES}
    ratios = {"fused/append throughput": rate["fused"] / rate["append"],
              "fused/update throughput": rate["fused"] / rate["update"],
              "fused/append state memory": state["fused"] / state["append"]}
    for name, value in ratios.items():
        op, bound = FUSED_TARGETS[name]
        h.target(f"median {name}" if "throughput" in name else name, value, op, bound)
    h.write()


# --- session windows: final results through sluice vs Spark's append mode ---

SESSION_SIDES = ("append", "sluice", "unfused")


def make_session_input(spark: SparkSession, path: Path, rows: int, files: int, users: int, rate: int) -> None:
    """Sessions that grow, then close: event time id/rate; two groups of `users` users take turns,
    each user of the active group getting one event every users/rate seconds, four in a row, then
    idle while the other group is active (users/rate * 4 seconds, longer than the gap)."""
    per_file = rows // files
    for i in range(files):
        (spark.range(i * per_file, (i + 1) * per_file, numPartitions=1)
         .select((F.lit(1_700_000_000) + F.col("id") / rate).cast("timestamp").alias("ts"),
                 ((F.col("id") % users) + users * ((F.col("id") / (4 * users)).cast("long") % 2))
                 .cast("string").alias("user"))
         .write.mode("append").parquet(str(path / f"part-{i:04d}")))


def run_session_case(spark: SparkSession, src: Path, side: str, ckpt: Path) -> dict:
    """One query over the input: a session-window count (gap 30 s, watermark delay 10 s); `append` =
    Spark's own append mode; `sluice` = update mode + suppress(until_window_closes(unbounded())) as a
    user writes it (fused into Spark's append-mode session save, the default); `unfused` = the same
    with fusion off (sluice's session updates, then suppress's buffer). Each batch's rows are summed
    into a fingerprint (count, sum of a 31-bit hash per row) to compare the sides' results."""
    events = (spark.readStream.schema("ts timestamp, user string").option("maxFilesPerTrigger", 1)
              .option("recursiveFileLookup", "true").parquet(str(src)))
    counts = (events.withWatermark("ts", "10 seconds").groupBy(F.session_window("ts", "30 seconds"), "user")
              .count())
    out = counts if side == "append" else suppress(counts, Suppressed.until_window_closes(BufferConfig.unbounded()))
    spark.conf.set(FUSED_KEY, "false" if side == "unfused" else "true")
    fingerprint = [0, 0]

    def sink(batch: DataFrame, _: int) -> None:
        r = batch.agg(F.count("*").alias("n"), F.sum(F.pmod(F.xxhash64("session_window", "user", "count"), F.lit(2147483647))).alias("h")).first()
        fingerprint[0] += r["n"]
        fingerprint[1] += r["h"] or 0

    elapsed, progress = run_to_end(
        out.writeStream.foreachBatch(sink).outputMode("append" if side == "append" else "update"), ckpt)
    spark.conf.unset(FUSED_KEY)
    return {"seconds": elapsed, "emitted": fingerprint[0], "fingerprint": fingerprint[1], **state_figures(progress)}


def sessions(spark: SparkSession, work: Path, args: argparse.Namespace) -> None:
    src = work / "in-sessions"
    make_session_input(spark, src, args.rows, args.files, args.session_users, args.events_per_second)
    h = Harness("suppress_sessions", "session-window final results: sluice (update mode + suppress) vs Spark's "
                "append mode", {"rows": args.rows, "micro-batches": args.files, "users": 2 * args.session_users,
                                 "event time": f"{args.events_per_second} events/s; each user 4 events "
                                               f"{args.session_users / args.events_per_second:g} s apart, then "
                                               "idle as long; session gap 30 s, watermark delay 10 s",
                                 "comparator": "Spark's append mode for the same session-window count, default "
                                               "state store (HDFS-backed), 2 shuffle partitions, foreachBatch sink "
                                               "computing a fingerprint of the rows",
                                 "also shown": "unfused (spark.sluice.suppress.fused=false): sluice's session "
                                               "updates, then suppress's buffer; no target", "rounds": args.rounds})
    runs = h.alternating(list(SESSION_SIDES), args.rounds,
                         lambda side, i: run_session_case(spark, src, side, work / f"ckpt-sessions-{side}-{i}"),
                         warmup=lambda side: run_session_case(spark, src, side, work / f"ckpt-sessions-{side}-w"))
    for side in ("sluice", "unfused"):
        assert (runs[side][0]["emitted"], runs[side][0]["fingerprint"]) == \
            (runs["append"][0]["emitted"], runs["append"][0]["fingerprint"]), f"{side} and append emit different rows"
    rate = {c: args.rows / statistics.median(x["seconds"] for x in runs[c]) for c in SESSION_SIDES}
    state = {c: max(x["state_bytes"] for x in runs[c]) for c in SESSION_SIDES}
    print(f"   unfused/append: throughput {rate['unfused'] / rate['append']:.3f}, "
          f"state memory {state['unfused'] / state['append']:.3f} (no target)")
    h.target("median sluice/append throughput", rate["sluice"] / rate["append"], ">=", 0.95)
    h.target("sluice/append state memory", state["sluice"] / state["append"], "<=", 1.1)
    h.write()


GRACE_SIDES = {"watermark": None, "grace 0": 0, "grace 1 min": 60}


def grace(spark: SparkSession, work: Path, args: argparse.Namespace) -> None:
    """How soon finals leave with a grace per window below the watermark delay (KIP-328)."""
    file_s, rate = 10, args.events_per_second
    files = args.grace_minutes * 60 // file_s
    src = work / "grace-in"
    make_input(spark, src, files * file_s * rate, files, args.users, rate)
    # A last file a day later closes every window on every side, so each side emits the same finals
    # (the same work); the finals it closes are left out of the lags.
    closing_ts = 1_700_000_000 + files * file_s + 86_400
    (spark.range(1).select(F.lit(closing_ts).cast("timestamp").alias("ts"), F.lit("closing").alias("user"))
     .write.parquet(str(src / f"part-{files:04d}")))
    h = Harness("suppress_grace", "final results by until_window_closes: watermark only vs a grace per window",
                {"input": f"{args.grace_minutes} min of event time, {rate} events/s, {args.users} users, "
                          f"one {file_s}-s file per micro-batch",
                 "query": "1-minute tumbling windows, count per user, withWatermark 10 minutes, update mode + "
                          "suppress(until_window_closes(unbounded(), grace)); as planned by default: fused without a grace, "
                          "the buffered plan (aggregation, then suppress's buffer) with one",
                 "sides": {k: ("no grace (the watermark delay)" if v is None else f"grace {v} s")
                           for k, v in GRACE_SIDES.items()},
                 "lag": "stream time (largest event time read through the emitting batch) minus the window's end",
                 "comparator": "the watermark side (sluice's behaviour without grace, Spark's append-mode timing)",
                 "rounds": args.rounds})
    finals: dict[str, dict[tuple[int, str], int]] = {}

    def run(side: str, i: int) -> dict:
        emitted: list[tuple[int, int, str, int]] = []  # batch, window end (s), user, count

        def sink(batch: DataFrame, batch_id: int) -> None:
            emitted.extend((batch_id, int(r[0].timestamp()), r[1], r[2]) for r in
                           batch.select(F.col("window.end"), "user", "count").collect())

        events = (spark.readStream.schema("ts timestamp, user string").option("maxFilesPerTrigger", 1)
                  .option("recursiveFileLookup", "true").parquet(str(src)))
        counts = events.withWatermark("ts", "10 minutes").groupBy(F.window("ts", "1 minute"), "user").count()
        g = GRACE_SIDES[side]
        out = suppress(counts, Suppressed.until_window_closes(BufferConfig.unbounded(),
                                                              grace=None if g is None else timedelta(seconds=g)))
        start = time.perf_counter()
        q = (out.writeStream.foreachBatch(sink).outputMode("update")
             .option("checkpointLocation", str(work / f"ckpt-grace-{side.replace(' ', '')}-{i}")).start())
        q.processAllAvailable()
        elapsed = time.perf_counter() - start
        # stream time through each batch: the running maximum of the batches' largest event times
        seen, through = 0.0, {}
        for p in sorted(q.recentProgress, key=lambda p: p["batchId"]):
            top = p.get("eventTime", {}).get("max")
            if top:
                seen = max(seen, datetime.fromisoformat(top.replace("Z", "+00:00")).timestamp())
            through[p["batchId"]] = seen
        q.stop()
        lags = sorted(through[b] - end for b, end, _, _ in emitted if through[b] < closing_ts)
        keys = [(end, user) for _, end, user, _ in emitted]
        assert len(keys) == len(set(keys)), f"{side}: a final result emitted twice"
        if i >= 0:
            finals.setdefault(side, {}).update({(end, user): n for _, end, user, n in emitted})
        return {"seconds": elapsed, "events_per_s": files * file_s * rate / elapsed, "finals": len(emitted),
                "lag_p50_s": statistics.median(lags), "lag_p99_s": lags[min(len(lags) - 1, int(len(lags) * 0.99))]}

    runs = h.alternating(list(GRACE_SIDES), args.rounds, run, warmup=lambda side: run(side, -1))
    base = finals["watermark"]
    for side, got in finals.items():
        assert got == base, f"{side}: its finals differ from the watermark side's"
    med = {side: {k: statistics.median(r[k] for r in rs) for k in ("lag_p50_s", "lag_p99_s", "events_per_s")}
           for side, rs in runs.items()}
    for side, m in med.items():
        print(f"   {side}: lag p50 {m['lag_p50_s']:.0f} s, p99 {m['lag_p99_s']:.0f} s, {m['events_per_s']:.0f} events/s")
    h.target("grace 0 lag p99 / watermark lag p50", med["grace 0"]["lag_p99_s"] / med["watermark"]["lag_p50_s"],
             "<=", 0.1)
    h.target("throughput grace 0 / watermark", med["grace 0"]["events_per_s"] / med["watermark"]["events_per_s"],
             ">=", 0.95)
    h.write(medians=med)


LATE_EVERY = 100  # one record in LATE_EVERY is late
LATE_BY_S = 300


def late(spark: SparkSession, work: Path, args: argparse.Namespace) -> None:
    """The cost of keeping late records (written per batch) over counting them."""
    file_s, rate = 10, args.events_per_second
    files = args.grace_minutes * 60 // file_s
    per_file = file_s * rate
    src = work / "late-in"
    for i in range(files):
        (spark.range(i * per_file, (i + 1) * per_file, numPartitions=1)
         .select((F.lit(1_700_000_000) + F.col("id") / rate
                  - F.when(F.col("id") % LATE_EVERY == 0, LATE_BY_S).otherwise(0)).cast("timestamp").alias("ts"),
                 (F.col("id") * 7919 % args.users).cast("string").alias("user"))
         .write.parquet(str(src / f"part-{i:04d}")))
    h = Harness("suppress_late", "until_window_closes with a grace: late records counted vs kept",
                {"input": f"{args.grace_minutes} min of event time, {rate} events/s, {args.users} users, "
                          f"one {file_s}-s file per micro-batch; one record in {LATE_EVERY} {LATE_BY_S} s behind",
                 "query": "1-minute tumbling windows, count per user, withWatermark 10 minutes, update mode + "
                          "suppress(until_window_closes(unbounded(), grace=1 minute)) (the buffered plan)",
                 "sides": {"counted": "late records dropped and counted (the default)",
                           "kept": "late records kept: .with_late_records(<dir>, 'parquet')"},
                 "comparator": "the counted side", "rounds": args.rounds})
    seen: dict[str, tuple[dict, int]] = {}

    def run(side: str, i: int) -> dict:
        finals: dict[tuple[int, str], int] = {}

        def sink(batch: DataFrame, _: int) -> None:
            finals.update({(int(r[0].timestamp()), r[1]): r[2] for r in
                           batch.select(F.col("window.end"), "user", "count").collect()})

        events = (spark.readStream.schema("ts timestamp, user string").option("maxFilesPerTrigger", 1)
                  .option("recursiveFileLookup", "true").parquet(str(src)))
        counts = events.withWatermark("ts", "10 minutes").groupBy(F.window("ts", "1 minute"), "user").count()
        suppressed = Suppressed.until_window_closes(BufferConfig.unbounded(), grace=timedelta(minutes=1))
        kept = work / f"late-out-{i}"
        if side == "kept":
            suppressed = suppressed.with_late_records(str(kept), "parquet")
        start = time.perf_counter()
        q = (suppress(counts, suppressed).writeStream.foreachBatch(sink).outputMode("update")
             .option("checkpointLocation", str(work / f"ckpt-late-{side}-{i}")).start())
        q.processAllAvailable()
        elapsed = time.perf_counter() - start
        dropped = sum(op["customMetrics"]["lateRecordDropTotal"] for p in q.recentProgress
                      for op in p["stateOperators"] if op["operatorName"] == "suppress")
        q.stop()
        if side == "kept":
            n = spark.read.parquet(str(kept)).count()
            assert n == dropped, f"kept {n} late records, lateRecordDropTotal {dropped}"
        seen[side] = (finals, dropped)
        return {"seconds": elapsed, "events_per_s": files * per_file / elapsed, "late": dropped}

    runs = h.alternating(["counted", "kept"], args.rounds, run, warmup=lambda side: run(side, -1))
    assert seen["counted"][0] == seen["kept"][0], "the kept side's finals differ from the counted side's"
    # The counted side counts what reaches suppress (the aggregation's updates, one per window and key
    # of a batch), the kept side each record: as many or more.
    assert seen["kept"][1] >= seen["counted"][1] > 0, "late records: none, or fewer kept than counted"
    med = {side: statistics.median(r["events_per_s"] for r in rs) for side, rs in runs.items()}
    print(f"   late: {seen['kept'][1]} records kept, {seen['counted'][1]} updates counted; events/s counted "
          f"{med['counted']:.0f}, kept {med['kept']:.0f}")
    h.target("throughput kept / counted", med["kept"] / med["counted"], ">=", 0.95)
    h.write(medians=med)


def fused(spark: SparkSession, work: Path, args: argparse.Namespace) -> None:
    src = work / "in-fused"
    make_input(spark, src, args.rows, args.files, args.users, args.events_per_second)
    bench_fused(spark, src, work, args.rows, args.rounds)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default="all",
                    choices=["all", "throughput", "fused", "sessions", "grace", "late", "held", "bounded", "release"])
    ap.add_argument("--grace-minutes", type=int, default=20, help="minutes of event time (grace)")
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--users", type=int, default=2_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--session-users", type=int, default=10_000, help="users per group (sessions)")
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
        for case, fn in (("throughput", throughput), ("fused", fused), ("sessions", sessions), ("grace", grace),
                         ("late", late), ("held", held),
                         ("bounded", bounded),
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
