"""suppress (KIP-328, KIP-539) through the public API on real streaming queries and checkpoints.

Input arrives one JSON file per micro-batch (maxFilesPerTrigger=1); the sink is foreachBatch,
recording each batch's rows by batch id, so a replayed batch overwrites its first attempt.
"""
from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import pytest
from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sluice import BufferConfig, SluiceBufferFullError, SluiceSuppressError, Suppressed, suppress
from sluice._errors import translate
from sluice.suppress import EagerBufferConfig, StrictBufferConfig
from support.session import session_conf
from support.suppress import METRICS, CrashOnce, Run, at, ts, windowed

# `run` and `provider`: tests/suppress/conftest.py


@pytest.fixture
def one_partition(spark: SparkSession) -> Any:
    """One partition of the operator: its stream time and bound are per partition."""
    with session_conf(spark, {"spark.sql.shuffle.partitions": "1"}):
        yield


@pytest.fixture
def unfused(spark: SparkSession) -> Any:
    """The suppress operator itself, also where an unbounded until_window_closes would be fused into
    the aggregation (tests/suppress/test_suppress_fused.py covers that path)."""
    with session_conf(spark, {"spark.sluice.suppress.fused": "false"}):
        yield


def hourly_counts(events: DataFrame) -> DataFrame:
    """KIP-328's alert example: count per user and hour, 10 minutes grace."""
    return events.withWatermark("ts", "10 minutes").groupBy(F.window("ts", "1 hour"), "user").count()


# --- configuration (no Spark needed) -------------------------------------------------------------

def test_buffer_configs_are_typed_like_kafka() -> None:
    assert isinstance(BufferConfig.max_records(5), EagerBufferConfig)
    assert isinstance(BufferConfig.max_bytes(5), EagerBufferConfig)
    assert isinstance(BufferConfig.unbounded(), StrictBufferConfig)
    assert isinstance(BufferConfig.max_records(5).shut_down_when_full(), StrictBufferConfig)
    assert isinstance(BufferConfig.max_records(5).spill_to_disk_when_full(), StrictBufferConfig)
    assert isinstance(BufferConfig.unbounded().with_max_records(3).emit_early_when_full(), EagerBufferConfig)
    cfg = BufferConfig.max_records(5).with_max_bytes(100).shut_down_when_full().with_max_records(7)
    assert (cfg.records, cfg.bytes, cfg.when_full) == (7, 100, "shut_down")
    assert BufferConfig.max_bytes(9).with_no_bound() == BufferConfig.unbounded()
    # Emit-early configs cannot give final results: rejected at once, like Kafka's types.
    with pytest.raises(TypeError, match="strict buffer config"):
        Suppressed.until_window_closes(BufferConfig.max_records(10))
    with pytest.raises(TypeError, match="strict buffer config"):
        Suppressed.until_window_closes(BufferConfig.unbounded().with_max_bytes(10).emit_early_when_full())
    Suppressed.until_window_closes(BufferConfig.max_bytes(10).shut_down_when_full())


@pytest.mark.parametrize("make", [
    lambda: BufferConfig.max_records(-1),
    lambda: BufferConfig.max_bytes(-5),
    lambda: BufferConfig.unbounded().with_max_records(-1),
    lambda: BufferConfig.max_records(1).with_max_bytes(-1),
    lambda: Suppressed.until_time_limit(timedelta(seconds=-1), BufferConfig.unbounded()),
    lambda: Suppressed.until_wall_clock_time_limit(-2, BufferConfig.unbounded()),
])
def test_negative_durations_and_bounds_raise_value_error(make: Callable) -> None:
    with pytest.raises(ValueError, match="negative|>= 0"):
        make()


# --- misuse fails when the DataFrame is built --------------------------------------------------

def test_misuse_fails_at_build_time_with_what_to_do(spark: SparkSession, run: Run) -> None:
    unbounded = Suppressed.until_window_closes(BufferConfig.unbounded())
    limit = Suppressed.until_time_limit(timedelta(seconds=30), BufferConfig.max_records(1000))
    events = run.events()

    with pytest.raises(SluiceSuppressError, match="streaming DataFrame"):
        suppress(spark.range(3).groupBy("id").count(), limit, time_col="id")
    with pytest.raises(SluiceSuppressError, match="result of a streaming aggregation"):
        suppress(events, limit, time_col="ts")
    with pytest.raises(SluiceSuppressError, match="needs a time window"):
        suppress(events.groupBy("user").count(), unbounded)
    with pytest.raises(SluiceSuppressError, match="needs a watermark.*withWatermark"):
        suppress(events.groupBy(F.window("ts", "1 hour"), "user").count(), unbounded)
    counts = events.groupBy("user").agg(F.max("ts").alias("ts"), F.count("*").alias("n"))
    with pytest.raises(SluiceSuppressError, match="needs time_col"):
        suppress(counts, limit)
    with pytest.raises(SluiceSuppressError, match="must be a timestamp column"):
        suppress(counts, limit, time_col="n")
    with pytest.raises(SluiceSuppressError, match="not a column"):
        suppress(counts, limit, time_col="nope")
    with pytest.raises(SluiceSuppressError, match="only used by until_time_limit"):
        suppress(hourly_counts(events), unbounded, time_col="ts")
    sessions = (events.withWatermark("ts", "10 minutes")
                .groupBy(F.session_window("ts", "5 minutes"), "user").count())
    assert suppress(sessions, unbounded).columns == sessions.columns  # sessions: tests/sessions/test_sessions.py
    with pytest.raises(TypeError):
        suppress(counts, "until_window_closes")  # type: ignore[arg-type]
    # The well-formed calls build (and explain) without a running query.
    suppress(hourly_counts(events), unbounded).explain()
    assert suppress(counts, limit, time_col="ts").columns == counts.columns
    assert suppress(counts, Suppressed.until_time_limit(0, BufferConfig.unbounded()), time_col="ts").isStreaming


@pytest.mark.parametrize("mode", ["append", "complete"])
def test_non_update_output_mode_fails_at_query_start(spark: SparkSession, run: Run, mode: str) -> None:
    final = suppress(hourly_counts(run.events()), Suppressed.until_window_closes(BufferConfig.unbounded()))
    with pytest.raises(AnalysisException, match="output mode to be update.*outputMode\\(\"update\"\\)"):
        q = (final.writeStream.outputMode(mode).format("memory").queryName(f"wrong_{mode}")
             .option("checkpointLocation", str(run.ckpt)).start())
        try:
            run.write((0, "a"))
            q.processAllAvailable()
        finally:
            q.stop()


# --- until_window_closes -----------------------------------------------------------------------

def test_final_results_once_per_window_and_key_across_restarts(spark: SparkSession, run: Run,
                                                               provider: str, unfused: None) -> None:
    """KIP-328's hourly alert: one count per user and hour once the hour plus 10 minutes grace has
    passed; updates absorbed; late rows never reach the output; state survives restarts."""
    final = suppress(hourly_counts(run.events()), Suppressed.until_window_closes(BufferConfig.unbounded()))
    run.start(final)
    run.feed((60, "alice"), (120, "alice"), (300, "bob"))
    run.feed((1800, "alice"), (3500, "bob"))
    assert run.rows() == []  # the first hour is open: every update is suppressed
    ops = run.progress_of()
    assert sum(op["customMetrics"]["intermediateResultSuppressionTotal"] for op in ops) >= 2
    assert ops[-1]["customMetrics"]["suppressionBufferRecords"] == 2
    assert ops[-1]["customMetrics"]["suppressionBufferBytes"] > 0

    run.stop()
    run.start(final)  # restart: the buffer comes back from the checkpoint
    run.feed((3700, "alice"))  # watermark 3700 - 600 < 3600: hour 0 still open (grace)
    assert run.rows() == []
    run.feed((4300, "carol"))  # watermark reaches 3700 > 3600: hour 0 closes
    assert sorted(map(windowed, run.rows())) == [(at(0), "alice", 3), (at(0), "bob", 2)]

    run.feed((100, "alice"))  # late for a closed hour: dropped, never emitted
    run.stop()
    run.start(final)
    run.feed((9000, "dave"))  # closes hour 1 (alice 1, carol 1)
    got = Counter(windowed(r) for r in run.rows())
    assert got == Counter({(at(0), "alice", 3): 1, (at(0), "bob", 2): 1,
                           (at(3600), "alice", 1): 1, (at(3600), "carol", 1): 1})
    ops = run.progress_of()
    assert sum(op["customMetrics"]["suppressionEmitTotal"] for op in ops) == 2
    assert all(set(METRICS) <= set(op["customMetrics"]) for op in ops)
    # Suppress reuses the aggregation's partitioning: the only shuffle is the aggregation's.
    plan = run.query._jsq.explainInternal(False)
    assert "Suppress" in plan and plan.count("Exchange") == 1, plan


def test_windows_closing_in_a_no_data_batch_are_emitted_by_it(spark: SparkSession, run: Run,
                                                              unfused: None) -> None:
    final = suppress(hourly_counts(run.events()), Suppressed.until_window_closes(BufferConfig.unbounded()))
    run.start(final)
    run.feed((10, "a"), (20, "b"))
    run.feed((4000, "c"))  # advances the watermark to 3400; the next batch has no input
    run.feed((4300, "c"))  # watermark 3700 becomes effective in a no-data batch after this one
    emitting = [p for p in run.query.recentProgress
                if any(op["operatorName"] == "suppress" and op["customMetrics"]["suppressionEmitTotal"] > 0
                       for op in p["stateOperators"])]
    assert len(emitting) == 1 and emitting[0]["numInputRows"] == 0
    assert sorted(map(windowed, run.rows())) == [(at(0), "a", 1), (at(0), "b", 1)]


def test_hopping_windows_final_once_per_window(spark: SparkSession, run: Run) -> None:
    counts = (run.events().withWatermark("ts", "10 seconds")
              .groupBy(F.window("ts", "1 minute", "30 seconds"), "user").count())
    run.start(suppress(counts, Suppressed.until_window_closes(BufferConfig.unbounded())))
    run.feed((5, "a"), (35, "a"), (40, "a"))  # watermark 30 closes [-30, 30) only
    assert sorted(map(windowed, run.rows())) == [(at(-30), "a", 1)]
    run.feed((50, "a"))
    assert len(run.rows()) == 1
    run.feed((200, "b"))  # watermark 190: [0, 60) and [30, 90) close, each emitted once
    assert sorted(map(windowed, run.rows())) == [
        (at(-30), "a", 1), (at(0), "a", 4), (at(30), "a", 3)]


def test_replayed_batch_emits_the_same_rows_and_no_final_result_twice(spark: SparkSession, run: Run,
                                                                     provider: str) -> None:
    """A crash after suppress committed its state but before the batch committed: the restarted
    query replays the batch, emitting the same rows; no final result is lost or duplicated."""
    final = suppress(hourly_counts(run.events()), Suppressed.until_window_closes(BufferConfig.unbounded()))
    crash = CrashOnce()
    run.start(final, fail_when=crash)
    run.feed((10, "a"), (20, "b"), (30, "a"))
    with pytest.raises(StreamingQueryException, match="simulated crash"):
        run.feed((4300, "c"))  # closes hour 0 (in this batch or the no-data batch after it)
    run.query = None
    first_attempt = [rows for b, rows in run.attempts if b == crash.batch]

    run.start(final)
    run.query.processAllAvailable()
    replay = run.batches[crash.batch]
    assert sorted(map(windowed, replay)) == sorted(map(windowed, first_attempt[0]))
    run.feed((8000, "d"))  # closes hour 1
    got = Counter(windowed(r) for r in run.rows())
    assert got == Counter({(at(0), "a", 2): 1, (at(0), "b", 1): 1, (at(3600), "c", 1): 1})


# --- until_time_limit --------------------------------------------------------------------------

def test_rate_limit_at_most_once_per_key_per_limit(spark: SparkSession, run: Run, provider: str,
                                                   one_partition: None) -> None:
    """KIP-328's rate limit: a 30 s limit with max_records(1000) over a per-user table; stream time
    is the largest time_col seen; an update does not restart the timer."""
    table = run.events().groupBy("user").agg(F.max("ts").alias("ts"), F.sum("v").alias("total"))
    limited = suppress(table, Suppressed.until_time_limit(timedelta(seconds=30), BufferConfig.max_records(1000)),
                       time_col="ts")
    run.start(limited)
    run.feed((0, "a", 1), (5, "b", 1))
    run.feed((20, "a", 1))           # update of a: keeps buffer time 0
    assert run.rows() == []
    run.feed((31, "c", 1))           # stream time 31: a (buffered at 0) is due; b (5) is not
    assert [(r["user"], r["total"]) for r in run.rows()] == [("a", 2)]
    run.stop()
    run.start(limited)               # stream time and buffer survive the restart
    run.feed((36, "a", 5))           # a re-buffered at 36; stream time 36 releases b (5)
    assert sorted((r["user"], r["total"]) for r in run.rows()) == [("a", 2), ("b", 1)]
    run.feed((70, "z", 1))           # releases c (31) and a (36) with their latest rows
    out = [(r["user"], r["total"]) for r in run.rows()]
    assert sorted(out) == [("a", 2), ("a", 7), ("b", 1), ("c", 1)]
    # a was emitted at stream time 31 and 70: once per 30 s although it was updated in between.
    assert sum(op["customMetrics"]["intermediateResultSuppressionTotal"] for op in run.progress_of()) == 0


def test_zero_time_limit_forwards_at_once(spark: SparkSession, run: Run) -> None:
    table = run.events().groupBy("user").agg(F.max("ts").alias("ts"), F.count("*").alias("n"))
    run.start(suppress(table, Suppressed.until_time_limit(0, BufferConfig.unbounded()), time_col="ts"))
    run.feed((0, "a"), (1, "b"))
    run.feed((2, "a"))
    assert [sorted((r["user"], r["n"]) for r in run.batches[b]) for b in sorted(run.batches)] == [
        [("a", 1), ("b", 1)], [("a", 2)]]


def test_emit_early_when_full_emits_oldest_first(spark: SparkSession, run: Run, one_partition: None) -> None:
    table = run.events().groupBy("user").agg(F.max("ts").alias("ts"), F.count("*").alias("n"))
    limited = suppress(table, Suppressed.until_time_limit(3600, BufferConfig.max_records(2)), time_col="ts")
    run.start(limited)
    run.feed((10, "a"), (20, "b"))
    assert run.rows() == []
    run.feed((30, "c"), (40, "d"), (15, "a"))  # 4 keys > 2: the two oldest (a@10, b@20) go early
    assert sorted((r["user"], r["n"]) for r in run.rows()) == [("a", 2), ("b", 1)], run.progress_of()
    m = run.progress_of()[-1]["customMetrics"]
    assert m["suppressionEvictTotal"] == 2 and m["suppressionBufferRecords"] == 2
    assert m["suppressionEmitTotal"] == 0
    # a's row (time 15) arrived when stream time was already >= 20: at least 5 s late.
    assert m["recordLatenessMaxMs"] >= 5000 and 0 < m["recordLatenessAvgMs"] <= m["recordLatenessMaxMs"]
    assert m["suppressionBufferBytesMax"] >= m["suppressionBufferBytes"] > 0


def per_user_table(run: Run) -> DataFrame:
    return run.events().groupBy("user").agg(F.max("ts").alias("ts"), F.count("*").alias("n"))


@pytest.mark.parametrize("order", [("a", "b"), ("b", "a")])
@pytest.mark.parametrize("batches", ["one batch", "a batch each"])
def test_ties_on_buffer_time_evict_the_smaller_key_like_kafka(spark: SparkSession, run: Run, provider: str,
                                                             one_partition: None, order: tuple,
                                                             batches: str) -> None:
    """Kafka Streams orders its buffer by buffer time, then key bytes: with a@5 and b@5 in a
    one-record buffer it emits a early, whichever came first."""
    limited = suppress(per_user_table(run), Suppressed.until_time_limit(1, BufferConfig.max_records(1)),
                       time_col="ts")
    run.start(limited)
    if batches == "one batch":
        run.feed(*[(5, u) for u in order])
    else:
        for u in order:
            run.feed((5, u))
    assert [(r["user"], r["n"]) for r in run.rows()] == [("a", 1)]
    assert sum(op["customMetrics"]["suppressionEvictTotal"] for op in run.progress_of()) == 1


@pytest.mark.parametrize("reload", ["restart", "replay of an older version"])
def test_ties_evict_the_same_keys_after_a_store_reload(spark: SparkSession, run: Run, provider: str,
                                                      one_partition: None, reload: str) -> None:
    """20 keys held at the same buffer time, reloaded from the checkpoint (a restart, or a replay
    from the version before the last one committed): each overflow evicts the smallest keys by
    bytes, never the store's iteration order. The index is rebuilt once per load, not per batch."""
    users = [f"u{i:02d}" for i in range(30)]  # same length: byte order is string order
    limited = suppress(per_user_table(run), Suppressed.until_time_limit(3600, BufferConfig.max_records(20)),
                       time_col="ts")
    crash = CrashOnce()  # on the first eviction
    run.start(limited, fail_when=None if reload == "restart" else crash)
    run.feed(*[(5, u) for u in reversed(users[:20])])
    if reload == "restart":
        run.stop()
        run.start(limited)
        run.feed(*[(5, u) for u in users[20:25]])
    else:
        with pytest.raises(StreamingQueryException, match="simulated crash"):
            run.feed(*[(5, u) for u in users[20:25]])
        first_attempt = [r["user"] for b, rows in run.attempts if b == crash.batch for r in rows]
        assert sorted(first_attempt) == users[:5]
        run.query = None
        run.start(limited)  # replays the batch from the state version before it
        run.query.processAllAvailable()
        assert [r["user"] for r in run.batches[crash.batch]] == first_attempt
    run.feed(*[(5, u) for u in users[25:30]])
    assert sorted(r["user"] for r in run.rows()) == users[:10]
    ops = run.progress_of()
    # The restarted run scans its store once, in its first batch, and then continues with the index.
    assert [op["customMetrics"]["suppressionIndexRebuildTotal"] for op in ops] == [1] + [0] * (len(ops) - 1)


@pytest.mark.parametrize("when_full", ["emit_early", "spill_to_disk"])
def test_a_batch_larger_than_the_bound_never_holds_more_than_the_bound(spark: SparkSession, run: Run,
                                                                      provider: str, one_partition: None,
                                                                      when_full: str) -> None:
    """The bound is enforced as rows are put (Kafka checks after each record): one batch of 100
    keys into a buffer bounded to 2,000 bytes never holds more than the bound plus one row."""
    bound = 2000
    cfg = BufferConfig.max_bytes(bound)
    if when_full == "spill_to_disk":
        cfg = cfg.spill_to_disk_when_full()
    limited = suppress(per_user_table(run), Suppressed.until_time_limit(3600, cfg), time_col="ts")
    run.start(limited)
    run.feed((5, "u100"))
    # A bounded buffer's rows arrive sorted (time_col, then keys): replays decide the same.
    assert "Sort [ts" in run.query._jsq.explainInternal(False)
    entry = run.progress_of()[-1]["customMetrics"]["suppressionBufferBytes"]  # all entries are this size
    assert 0 < entry < bound // 4
    run.feed(*[(5, f"u{i:03d}") for i in range(100)])
    m = run.progress_of()[-1]["customMetrics"]
    kept = bound // entry
    assert m["suppressionBufferBytes"] == kept * entry
    assert bound < m["suppressionBufferBytesMax"] <= bound + entry
    if when_full == "emit_early":
        assert m["suppressionEvictTotal"] == 101 - kept and len(run.rows()) == 101 - kept
        # The oldest go first: all are at 5, so the smallest keys by bytes.
        assert sorted(r["user"] for r in run.rows()) == sorted([f"u{i:03d}" for i in range(100)] + ["u100"])[:101 - kept]
    else:
        assert m["suppressionEvictTotal"] == 0 and run.rows() == []
        assert m["suppressionDiskBufferBytes"] == (101 - kept) * entry


def test_shut_down_when_full_then_restart_with_larger_bound_loses_nothing(spark: SparkSession, run: Run,
                                                                         provider: str) -> None:
    counts = hourly_counts(run.events())
    small = Suppressed.until_window_closes(BufferConfig.max_records(1).shut_down_when_full()).with_name("alerts")

    def start(df: DataFrame, name: str) -> Any:  # a JVM sink: the task's exception reaches Python
        run.query = (df.writeStream.outputMode("update").format("memory").queryName(name)
                     .option("checkpointLocation", str(run.ckpt)).start())
        return run.query

    start(suppress(counts, small), "shutdown_small")
    run.feed((10, "a"))
    with pytest.raises(StreamingQueryException) as info:
        run.feed(*[(20 + i, f"user{i}") for i in range(8)])  # 9 keys over 2 partitions: some partition > 1
    err = translate(info.value)
    assert isinstance(err, SluiceBufferFullError), err
    assert "alerts" in str(err) and "[records/max] = [" in str(err) and "/1]" in str(err)
    assert "[bytes/max] = [" in str(err)
    assert spark.table("shutdown_small").count() == 0
    run.query = None

    larger = Suppressed.until_window_closes(BufferConfig.max_records(100).shut_down_when_full())
    run.start(suppress(counts, larger))  # the same checkpoint; the failed batch is replayed
    run.feed((4300, "z"))
    assert sorted(map(windowed, run.rows())) == sorted([(at(0), "a", 1)] + [(at(0), f"user{i}", 1) for i in range(8)])


def test_spill_to_disk_results_identical_to_unbounded(spark: SparkSession, tmp_path: Path, provider: str) -> None:
    runs = {}
    cfgs = {"unbounded": BufferConfig.unbounded(),
            "spill": BufferConfig.max_records(1).spill_to_disk_when_full()}
    for name, cfg in cfgs.items():
        r = Run(spark, tmp_path / name)
        r.start(suppress(hourly_counts(r.events()), Suppressed.until_window_closes(cfg)))
        runs[name] = r
    batches = [[(10 * i, f"u{i}") for i in range(6)], [(100, "u1"), (3700, "u7"), (3800, "u8")],
               [(7300, "u9")], [(11000, "x")]]
    try:
        for events in batches:
            for r in runs.values():
                r.feed(*events)
        spill = runs["spill"].progress_of()
        assert max(op["customMetrics"]["suppressionDiskBufferBytes"] for op in spill) > 0
        # In memory: at most one row per partition (2 partitions).
        assert max(op["customMetrics"]["suppressionBufferRecords"] for op in spill) <= 2
        assert sum(op["customMetrics"]["suppressionEvictTotal"] for op in spill) == 0
        # Both stores of both partitions are scanned once, when first opened; later batches
        # (no-data batches included) continue with the indexes they committed.
        rebuilt = [op["customMetrics"]["suppressionIndexRebuildTotal"] for op in spill]
        assert rebuilt == [4] + [0] * (len(spill) - 1)
        got = {n: sorted(map(windowed, r.rows())) for n, r in runs.items()}
        assert got["spill"] == got["unbounded"] and len(got["spill"]) == 8
        # Per batch too: nothing is emitted early.
        assert [len(r) for r in runs["spill"].batches.values()] == [len(r) for r in runs["unbounded"].batches.values()]
    finally:
        for r in runs.values():
            r.stop()


def test_spill_to_disk_keeps_spilled_rows_across_a_restart(spark: SparkSession, tmp_path: Path) -> None:
    """Rows spilled to the disk store before a stop are emitted after the restart, as an unbounded
    buffer run without a stop emits them."""
    batches = [[(10 * i, f"u{i}") for i in range(6)], [(100, "u1"), (3700, "u7"), (3800, "u8")],
               [(7300, "u9")], [(11000, "x")]]
    runs = {"unbounded": Run(spark, tmp_path / "unbounded"), "spill": Run(spark, tmp_path / "spill")}
    cfgs = {"unbounded": BufferConfig.unbounded(), "spill": BufferConfig.max_records(1).spill_to_disk_when_full()}

    def start(name: str) -> None:
        runs[name].start(suppress(hourly_counts(runs[name].events()), Suppressed.until_window_closes(cfgs[name])))

    try:
        for name in runs:
            start(name)
        for events in batches[:2]:
            for r in runs.values():
                r.feed(*events)
        before = runs["spill"].progress_of()
        assert before[-1]["customMetrics"]["suppressionDiskBufferBytes"] > 0  # held on disk at the stop
        runs["spill"].stop()
        start("spill")
        for events in batches[2:]:
            for r in runs.values():
                r.feed(*events)
        after = runs["spill"].progress_of()
        # The restarted run opens both stores of both partitions afresh: one scan each.
        assert after[0]["customMetrics"]["suppressionIndexRebuildTotal"] == 4
        got = {n: sorted(map(windowed, r.rows())) for n, r in runs.items()}
        assert got["spill"] == got["unbounded"] and len(got["spill"]) == 8
    finally:
        for r in runs.values():
            r.stop()


# --- until_wall_clock_time_limit ---------------------------------------------------------------

def _wait_for(query: Any, predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out; progress: {[p['batchId'] for p in query.recentProgress]}")
        if query.exception() is not None:
            raise query.exception()
        query.awaitTermination(0.1)


def test_wall_clock_limit_flushes_idle_buffer_without_input(spark: SparkSession, run: Run) -> None:
    table = run.events().groupBy("user").agg(F.count("*").alias("n"))
    limited = suppress(table, Suppressed.until_wall_clock_time_limit(timedelta(seconds=3), BufferConfig.max_bytes(5_000_000)))
    run.write((0, "a"), (1, "b"), (2, "a"))
    started = time.monotonic()
    run.start(limited, trigger={"processingTime": "250 milliseconds"})
    # Rows reach the sink before the batch's progress is posted: wait for both.
    _wait_for(run.query, lambda: len(run.rows()) == 2 and len(run.query.recentProgress) >= 2)
    assert time.monotonic() - started >= 3
    assert sorted((r["user"], r["n"]) for r in run.rows()) == [("a", 2), ("b", 1)]
    progress = run.query.recentProgress
    flush = [p for p in progress if any(op["operatorName"] == "suppress" and op["customMetrics"]["suppressionEmitTotal"]
                                        for op in p["stateOperators"])]
    assert len(flush) == 1 and flush[0]["numInputRows"] == 0
    # A no-data batch is asked for only when something is due: about 12 triggers passed while
    # waiting, but only the input batch and the flush batch ran (plus at most one early re-check).
    batch_ids = {p["batchId"] for p in progress}
    assert len(batch_ids) <= 3, [(p["batchId"], p["numInputRows"]) for p in progress]
    # And nothing more runs once the buffer is empty.
    run.query.awaitTermination(1.0)
    assert {p["batchId"] for p in run.query.recentProgress} == batch_ids


def test_several_suppress_operators_in_one_query(spark: SparkSession, run: Run, provider: str,
                                                 one_partition: None) -> None:
    """A rate limit feeding a final-result suppress: two sluice operators with their own state."""
    counts = hourly_counts(run.events())
    limited = suppress(counts, Suppressed.until_time_limit(timedelta(minutes=30), BufferConfig.max_records(1000)),
                       time_col="window.end")
    final = suppress(limited, Suppressed.until_window_closes(BufferConfig.unbounded()))
    run.start(final)
    run.feed((10, "a"), (20, "b"))
    run.feed((3000, "a"))
    run.stop()
    run.start(final)
    run.feed((4300, "c"))
    run.feed((9000, "d"))
    ops = [op for op in run.query.lastProgress["stateOperators"] if op["operatorName"] == "suppress"]
    assert len(ops) == 2
    assert Counter(map(windowed, run.rows())) == Counter({(at(0), "a", 2): 1, (at(0), "b", 1): 1,
                                                         (at(3600), "c", 1): 1})


def test_kill_and_restart_emits_each_final_result_exactly_once(spark: SparkSession, tmp_path: Path) -> None:
    """SIGKILL a query's whole process (driver JVM included) mid-stream, restart it here on the same
    checkpoint: with a sink idempotent per batch id, every final result arrives exactly once."""
    from support.children import kill_after_batches
    from support.inputs import hourly_finals, write_hourly_files
    from support.sinks import drain_to_files, emitted_finals
    from support.suppress_kill_child import file_sink, final_results

    provider = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    src, ckpt, out = tmp_path / "in", tmp_path / "ckpt", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    hours = 8
    write_hourly_files(src, hours, ts)

    kill_after_batches("suppress_kill_child.py", [str(src), str(ckpt), str(out), provider], out, batches=4)
    done_before_kill = len(list(out.glob("*.json")))
    assert done_before_kill < 2 * hours  # killed mid-stream, not after the end

    drain_to_files(spark, final_results(spark, str(src)), file_sink(str(out)), ckpt,
                   {"spark.sql.streaming.stateStore.providerClass": provider})

    assert emitted_finals(out) == hourly_finals(hours, lambda h: at(h * 3600).isoformat())
