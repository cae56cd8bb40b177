"""A grace period per window apart from the watermark delay (KIP-328): ``until_window_closes(buffer,
grace=...)`` closes a window once stream time (the largest event time of the batches before this
one: the batch's watermark + the watermark delay) passes its end plus the grace, batches before
Spark's watermark would close it; rows for a closed window are late: dropped and counted.

Input arrives one JSON file per micro-batch (maxFilesPerTrigger=1); the sink is foreachBatch,
recording each batch's rows by batch id, so a replayed batch overwrites its first attempt.
"""
from __future__ import annotations

import re
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sluice import BufferConfig, SluiceSuppressError, Suppressed, suppress
from sluice._connect import encode
from support import suppress as suppress_harness
from support.session import session_conf
from support.suppress import T0, CrashOnce, at

DELAY = "10 minutes"
GRACE = timedelta(seconds=30)

STATE_STORES = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "record_cache": "sluice.cache.CachingStateStoreProvider",
}


def seconds_of(iso: str) -> float:
    """A progress report's watermark (ISO, UTC) as seconds after T0."""
    t = datetime.strptime(iso.rstrip("Z"), "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=timezone.utc)
    return (t - T0).total_seconds()


class Run(suppress_harness.Run):
    """suppress's harness, keeping the progress of every run of the query across stops."""

    def __init__(self, spark: SparkSession, root: Path) -> None:
        super().__init__(spark, root)
        self.progress: list[dict] = []

    def stop(self) -> None:
        if self.query is not None:
            self.progress += self.query.recentProgress
        super().stop()

    def all_progress(self) -> list[dict]:
        return self.progress + (self.query.recentProgress if self.query is not None else [])

    def ops(self, name: str = "suppress") -> list[tuple[dict, dict]]:
        """(progress, operator) of each batch's operator `name`."""
        return [(p, op) for p in self.all_progress() for op in p["stateOperators"] if op["operatorName"] == name]

    def emitting_batches(self) -> list[dict]:
        return [p for p, op in self.ops() if op["customMetrics"]["suppressionEmitTotal"] > 0]

    def late_dropped(self) -> int:
        return sum(op["customMetrics"]["lateRecordDropTotal"] for _, op in self.ops())


@pytest.fixture
def run(spark: SparkSession, tmp_path: Path) -> Any:
    r = Run(spark, tmp_path)
    yield r
    r.stop()


@pytest.fixture(params=sorted(STATE_STORES))
def state_store(request: pytest.FixtureRequest, spark: SparkSession) -> Any:
    with session_conf(spark, {"spark.sql.streaming.stateStore.providerClass": STATE_STORES[request.param]}):
        yield request.param


def per_minute(events: DataFrame) -> DataFrame:
    return events.withWatermark("ts", DELAY).groupBy(F.window("ts", "1 minute"), "user").count()


def windowed(r: dict) -> tuple:
    return (r["window"]["start"].replace(tzinfo=None), r["user"], r["count"])


def feed_sequence(run: Run, df: DataFrame, restart: bool) -> None:
    """The sequence of test_finals_leave_... : windows [0, 60) and [60, 120), late rows for both."""
    run.start(df)
    run.feed((10, "a"), (20, "b"), (40, "a"))  # stream time 40 from the next batch on
    run.feed((95, "a"))  # stream time 95 after it: [0, 60) closes (60 + 30 <= 95) in a no-data batch
    run.feed((50, "a"), (55, "c"))  # late with the grace: [0, 60) is closed
    run.feed((100, "b"))
    if restart:
        run.stop()
        run.start(df)
    run.feed((151, "c"))  # [60, 120) closes (120 + 30 <= 151) in the no-data batch after it
    run.feed((70, "d"))  # late with the grace
    run.feed((800, "e"))  # the watermark (200 s) passes 180: without grace everything closes here


def test_finals_leave_when_stream_time_passes_end_plus_grace(spark: SparkSession, run: Run,
                                                             state_store: str) -> None:
    """A window's final leaves once stream time passes its end + grace, in a no-data batch when that
    happens between batches, while Spark's watermark is still far before the window end; a late row
    for a closed window changes nothing, is never emitted and is counted; a restart mid-way emits no
    final twice and loses none."""
    final = suppress(per_minute(run.events()), Suppressed.until_window_closes(BufferConfig.unbounded(), grace=GRACE))
    feed_sequence(run, final, restart=True)
    got = Counter(windowed(r) for r in run.rows())
    assert got == Counter({(at(0), "a", 2): 1, (at(0), "b", 1): 1, (at(60), "a", 1): 1, (at(60), "b", 1): 1,
                           (at(120), "c", 1): 1})
    # The buffered plan (an unbounded buffer with grace < delay is not fused): each final closed by
    # stream time in a no-data batch right after the batch that moved it, Spark's watermark there
    # 10 minutes behind stream time, far before the window's end.
    emitting = run.emitting_batches()
    first, second = emitting[0], emitting[1]
    assert first["numInputRows"] == 0 and seconds_of(first["eventTime"]["watermark"]) == 95 - 600
    assert second["numInputRows"] == 0 and seconds_of(second["eventTime"]["watermark"]) == 151 - 600
    # Three aggregate rows of closed windows ([0, 60) for a and c, [60, 120) for d) dropped as late.
    assert run.late_dropped() == 3
    assert sum(op["numRowsDroppedByWatermark"] for _, op in run.ops()) == 3
    assert sum(op["customMetrics"]["suppressionEmitTotal"] for _, op in run.ops()) == 5


def test_without_grace_or_with_grace_equal_to_the_delay_results_are_todays(spark: SparkSession,
                                                                           tmp_path: Path) -> None:
    """No grace: windows close at the watermark, the late rows above count (exactly the result of
    the same query before grace existed); grace equal to the delay is the same, batch for batch."""
    results = []
    for name, suppressed in [("none", Suppressed.until_window_closes(BufferConfig.unbounded())),
                             ("delay", Suppressed.until_window_closes(BufferConfig.unbounded(),
                                                                      grace=timedelta(minutes=10)))]:
        run = Run(spark, tmp_path / name)
        try:
            feed_sequence(run, suppress(per_minute(run.events()), suppressed), restart=False)
            # Fused as before: no suppress operator of its own.
            assert run.ops() == []
            results.append(run.batches)
        finally:
            run.stop()
    assert results[0] == results[1]
    got = Counter(windowed(r) for b in sorted(results[0]) for r in results[0][b])
    assert got == Counter({(at(0), "a", 3): 1, (at(0), "b", 1): 1, (at(0), "c", 1): 1, (at(60), "a", 1): 1,
                           (at(60), "b", 1): 1, (at(60), "d", 1): 1, (at(120), "c", 1): 1})
    assert len([b for b in results[0].values() if b]) == 1  # all in the batch the watermark reaches 180 s


def test_grace_unfused_and_bounded_buffers_agree(spark: SparkSession, tmp_path: Path) -> None:
    """The same finals from the suppress operator with the fused plan switched off and from a
    bounded (spilling) buffer."""
    results = []
    for name, buffer, conf in [
            ("unfused", BufferConfig.unbounded(), {"spark.sluice.suppress.fused": "false"}),
            ("spill", BufferConfig.max_records(1).spill_to_disk_when_full(), {})]:
        run = Run(spark, tmp_path / name)
        try:
            with session_conf(spark, conf):
                feed_sequence(run, suppress(per_minute(run.events()),
                                            Suppressed.until_window_closes(buffer, grace=GRACE)), restart=False)
            results.append(Counter(windowed(r) for r in run.rows()))
            assert run.late_dropped() == 3
        finally:
            run.stop()
    assert results[0] == results[1] == Counter({(at(0), "a", 2): 1, (at(0), "b", 1): 1, (at(60), "a", 1): 1,
                                                (at(60), "b", 1): 1, (at(120), "c", 1): 1})


def test_replayed_batch_emits_the_same_finals(spark: SparkSession, run: Run) -> None:
    """A crash in the batch that emits the finals closed by stream time: the restarted query replays
    it (the same watermark from the offset log, so the same stream time) and emits the same rows."""
    final = suppress(per_minute(run.events()), Suppressed.until_window_closes(BufferConfig.unbounded(), grace=GRACE))
    crash = CrashOnce()
    run.start(final, fail_when=crash)
    run.feed((10, "a"), (20, "b"), (40, "a"))
    with pytest.raises(StreamingQueryException, match="simulated crash"):
        run.feed((95, "a"))
    run.query = None
    first_attempt = [rows for b, rows in run.attempts if b == crash.batch][0]
    run.start(final)
    run.query.processAllAvailable()
    assert sorted(map(windowed, run.batches[crash.batch])) == sorted(map(windowed, first_attempt)) == [
        (at(0), "a", 2), (at(0), "b", 1)]
    run.feed((50, "a"))  # late
    run.feed((151, "c"))
    got = Counter(windowed(r) for r in run.rows())
    assert got == Counter({(at(0), "a", 2): 1, (at(0), "b", 1): 1, (at(60), "a", 1): 1})


def test_hopping_windows_close_by_stream_time(spark: SparkSession, run: Run) -> None:
    counts = run.events().withWatermark("ts", DELAY).groupBy(F.window("ts", "1 minute", "30 seconds"), "user").count()
    run.start(suppress(counts, Suppressed.until_window_closes(BufferConfig.unbounded(), grace=timedelta(seconds=20))))
    run.feed((5, "a"), (35, "a"), (40, "a"))
    run.feed((55, "b"))  # stream time 55 after it: [-30, 30) closes
    assert sorted(map(windowed, run.rows())) == [(at(-30), "a", 1)]
    run.feed((81, "c"))  # 81: [0, 60) closes
    assert sorted(map(windowed, run.rows())) == [(at(-30), "a", 1), (at(0), "a", 3), (at(0), "b", 1)]
    run.feed((20, "a"))  # late for [-30, 30) and [0, 60): dropped, counted
    run.feed((111, "d"))  # 111: [30, 90) closes
    assert Counter(map(windowed, run.rows())) == Counter({
        (at(-30), "a", 1): 1, (at(0), "a", 3): 1, (at(0), "b", 1): 1,
        (at(30), "a", 2): 1, (at(30), "b", 1): 1, (at(30), "c", 1): 1})
    assert run.late_dropped() == 2


def test_session_windows_close_at_their_end_plus_grace(spark: SparkSession, run: Run, state_store: str) -> None:
    """A session closes once stream time passes its end plus the grace; a late row that Spark merges
    into the closed session (its state is kept until the watermark) changes no final result."""
    sessions = (run.events().withWatermark("ts", DELAY).groupBy(F.session_window("ts", "30 seconds"), "user")
                .agg(F.count("*").alias("n")))
    run.start(suppress(sessions, Suppressed.until_window_closes(BufferConfig.unbounded(), grace=timedelta(minutes=1))))
    run.feed((10, "a"), (20, "a"))  # a: [10, 50)
    run.feed((200, "b"))  # stream time 200 after it: 50 + 60 <= 200, a's session closes
    key = [(r["user"], r["session_window"]["start"].replace(tzinfo=None), r["session_window"]["end"].replace(tzinfo=None),
            r["n"]) for r in run.rows()]
    assert key == [("a", at(10), at(50), 2)]
    run.stop()
    run.start(suppress(sessions, Suppressed.until_window_closes(BufferConfig.unbounded(),
                                                                grace=timedelta(minutes=1))))
    run.feed((30, "a"))  # merges into a's closed session: late, nothing emitted
    run.feed((400, "c"))  # closes b's session
    finals = Counter((r["user"], r["session_window"]["start"].replace(tzinfo=None),
                      r["session_window"]["end"].replace(tzinfo=None), r["n"]) for r in run.rows())
    assert finals == Counter({("a", at(10), at(50), 2): 1, ("b", at(200), at(230), 1): 1})
    assert run.late_dropped() == 1


# --- misuse and the other front ends -------------------------------------------------------------

def test_grace_above_the_watermark_delay_fails_when_the_dataframe_is_built(spark: SparkSession, run: Run) -> None:
    with pytest.raises(SluiceSuppressError) as e:
        suppress(per_minute(run.events()), Suppressed.until_window_closes(BufferConfig.unbounded(),
                                                                         grace=timedelta(minutes=15)))
    assert "900000ms" in str(e.value) and "600000ms" in str(e.value), str(e.value)


@pytest.mark.parametrize("grace,error", [(-1, ValueError), (timedelta(seconds=-1), ValueError), (True, TypeError),
                                         ("30s", TypeError)])
def test_bad_grace_values_raise(grace: Any, error: type) -> None:
    with pytest.raises(error, match="grace period"):
        Suppressed.until_window_closes(BufferConfig.unbounded(), grace=grace)


@pytest.fixture
def counts_view(spark: SparkSession, run: Run) -> Any:
    per_minute(run.events()).createOrReplaceTempView("grace_counts")
    yield
    spark.catalog.dropTempView("grace_counts")


def _suppress_node(df: DataFrame) -> str:
    plan = df._jdf.queryExecution().analyzed().toString()
    node = next(line for line in plan.splitlines() if "SuppressNode" in line)
    return re.sub(r"#\d+", "", node.strip(" +-:"))


@pytest.mark.parametrize("args", ["'until_window_closes', INTERVAL 30 SECONDS",
                                  "'until_window_closes', 'unbounded', '30 seconds'"])
def test_sql_grace_builds_the_python_api_operator(spark: SparkSession, run: Run, counts_view: None,
                                                  args: str) -> None:
    in_sql = spark.sql(f"SELECT * FROM sluice_suppress(TABLE(grace_counts), {args})")
    in_python = suppress(per_minute(run.events()), Suppressed.until_window_closes(BufferConfig.unbounded(),
                                                                                 grace=GRACE))
    assert _suppress_node(in_sql) == _suppress_node(in_python)
    no_grace = suppress(per_minute(run.events()), Suppressed.until_window_closes(BufferConfig.unbounded()))
    assert _suppress_node(in_sql) != _suppress_node(no_grace)


def test_sql_grace_above_the_delay_is_an_analysis_error_naming_both(spark: SparkSession, counts_view: None) -> None:
    with pytest.raises(AnalysisException, match="900000ms.*600000ms"):
        spark.sql("SELECT * FROM sluice_suppress(TABLE(grace_counts), 'until_window_closes', INTERVAL 15 MINUTES)")


def test_connect_message_carries_the_grace() -> None:
    with_grace = encode(b"", **Suppressed.until_window_closes(BufferConfig.unbounded(), grace=GRACE)._wire())
    without = encode(b"", **Suppressed.until_window_closes(BufferConfig.unbounded())._wire())
    # field 9 (varint): tag 9 << 3 = 0x48, then 30000 as a varint
    assert with_grace == without + bytes([0x48, 0xB0, 0xEA, 0x01])
