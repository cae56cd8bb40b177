"""sluice.inspect: a query's sluice state read from its checkpoint in a fresh SparkSession.

Every query runs to completion on the shared session and stops; then that session's SparkContext
stops and the checkpoints are inspected from a new one (which has never run a query: Spark's
statestore reader needs the state store coordinator such a session lacks). Expected buffers, due
times and held rows are worked out here from the input, by the rules the operators document.
"""
from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sluice import BufferConfig, Suppressed, suppress
from sluice.inspect import SluiceState, inspect
from support.session import session_conf, sluice_session, stop_session

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
T0_MS = int(T0.timestamp() * 1000)
PROVIDERS = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "window_store": "sluice.windowstore.InMemoryWindowStoreProvider",
}
RETENTION_MS = 120_000  # window store retention in the window-store runs
HOUR_MS = 3_600_000


def ms(seconds: float) -> int:
    return T0_MS + int(seconds * 1000)


def write_input(folder: Path, batches: list[list[tuple[float, str]]]) -> None:
    """One file a batch; the file source takes files in modification-time order, set 1 s apart."""
    folder.mkdir(parents=True)
    for i, events in enumerate(batches):
        path = folder / f"{i:05d}.json"
        with open(path, "w") as f:
            for sec, user in events:
                f.write(json.dumps({"ts": (T0 + timedelta(seconds=sec)).isoformat(), "user": user}) + "\n")
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))


def start(spark: SparkSession, root: Path, batches: list[list[tuple[float, str]]],
          build: Callable[[DataFrame], DataFrame], conf: dict[str, str]) -> tuple[Any, Path]:
    """Starts the query `build(events)` over `batches` (one file a micro-batch) with the session
    settings `conf`, which the query keeps (it runs on a copy of the session taken at start)."""
    write_input(root / "in", batches)
    events = (spark.readStream.schema("ts timestamp, user string")
              .option("maxFilesPerTrigger", 1).json(str(root / "in")))
    with session_conf(spark, conf):
        query = (build(events).writeStream.outputMode("update").format("noop")
                 .option("checkpointLocation", str(root / "ckpt")).start())
    return query, root / "ckpt"


def hourly(events: DataFrame) -> DataFrame:
    return events.withWatermark("ts", "10 seconds").groupBy(F.window("ts", "1 minute"), "user").count()


# until_window_closes: windows of 1 minute, 10 s grace. Batch 0 ends at event time 65 s, batch 1 at
# 125 s; the no-data batch after it closes the windows ending by 115 s (the watermark).
WINDOW_INPUT = [[(5, "a"), (7, "b"), (20, "a"), (65, "c")], [(70, "a"), (125, "b")]]
WINDOW_WATERMARK_S = 125 - 10


def expected_window_rows() -> set[tuple]:
    counts: dict[tuple[int, str], int] = {}
    for batch in WINDOW_INPUT:
        for sec, user in batch:
            start = int(sec // 60) * 60
            counts[(start, user)] = counts.get((start, user), 0) + 1
    # (window end ms, user, count, buffer time = due = window end, due at the next batch?)
    return {(ms(s + 60), u, n, ms(s + 60), ms(s + 60), ms(s + 60) <= ms(WINDOW_WATERMARK_S))
            for (s, u), n in counts.items() if s + 60 > WINDOW_WATERMARK_S}


# until_time_limit 30 s on max(ts) per user, one partition (stream time is per partition).
LIMIT_INPUT = [[(0, "a"), (10, "b"), (20, "a")], [(45, "c"), (25, "b")]]
LIMIT_S = 30


def expected_limit_rows() -> tuple[set[tuple], int]:
    totals: dict[str, tuple[int, int]] = {}  # the aggregation: user -> (max ts, count)
    buffered: dict[str, int] = {}  # user -> buffer time (the first time_col buffered)
    stream_time = None
    for batch in LIMIT_INPUT:
        for sec, user in batch:
            t, n = totals.get(user, (sec, 0))
            totals[user] = (max(t, sec), n + 1)
        for user in {u for _, u in batch}:  # the batch's updated rows
            buffered.setdefault(user, totals[user][0])
            stream_time = totals[user][0] if stream_time is None else max(stream_time, totals[user][0])
        buffered = {u: bt for u, bt in buffered.items() if bt > stream_time - LIMIT_S}  # the rest is emitted
    rows = {(u, ms(totals[u][0]), totals[u][1], ms(bt), ms(bt + LIMIT_S), bt + LIMIT_S <= stream_time)
            for u, bt in buffered.items()}
    return rows, ms(stream_time)


# Emission cache, interval 1 h: every key enters in batch 0, some are updated in batch 1.
CACHE_INPUT = [[(0, "a"), (1, "b"), (2, "c"), (3, "a")], [(4, "b"), (5, "a")]]


# until_wall_clock_time_limit 1 h: a and b enter in batch 0, c in batch 1.
WALL_INPUT = [[(0, "a"), (1, "b")], [(2, "a"), (3, "c")]]


# Spill to disk, at most 1 row in memory: distinct windows, so the newest (spilled first) is unique.
SPILL_INPUT = [[(5, "a"), (65, "b"), (125, "c")], [(130, "d")]]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Runs every query to its end (side by side: they share nothing but the session), then stops
    them and the session."""
    root = tmp_path_factory.mktemp("inspect")
    spark = sluice_session()
    queries: dict[str, Any] = {}
    for name, cls in PROVIDERS.items():
        conf = {"spark.sql.streaming.stateStore.providerClass": cls}
        if name == "window_store":
            # Stream time is per partition: one partition makes it a function of the input alone.
            conf.update({"spark.sluice.windowstore.retention": str(RETENTION_MS),
                         "spark.sql.shuffle.partitions": "1"})
        # The suppress operator's buffer (an unbounded until_window_closes would otherwise be fused
        # into the aggregation, with no buffer to inspect).
        queries[f"window/{name}"] = start(
            spark, root / name / "window", WINDOW_INPUT,
            lambda ev: suppress(hourly(ev), Suppressed.until_window_closes(BufferConfig.unbounded())
                                .with_name("final counts")), {**conf, "spark.sluice.suppress.fused": "false"})
        queries[f"limit/{name}"] = start(
            spark, root / name / "limit", LIMIT_INPUT,
            lambda ev: suppress(ev.groupBy("user").agg(F.max("ts").alias("ts"), F.count("*").alias("n")),
                                Suppressed.until_time_limit(timedelta(seconds=LIMIT_S), BufferConfig.max_records(100)),
                                time_col="ts"),
            {**conf, "spark.sql.shuffle.partitions": "1"})
        queries[f"cache/{name}"] = start(
            spark, root / name / "cache", CACHE_INPUT, lambda ev: ev.groupBy("user").count(),
            {**conf, "spark.sluice.commit.interval.ms": str(HOUR_MS)})
    queries["wall"] = start(
        spark, root / "wall", WALL_INPUT,
        lambda ev: suppress(ev.groupBy("user").count(),
                            Suppressed.until_wall_clock_time_limit(timedelta(hours=1), BufferConfig.unbounded())),
        {})
    queries["spill"] = start(
        spark, root / "spill", SPILL_INPUT,
        lambda ev: suppress(hourly(ev), Suppressed.until_window_closes(
            BufferConfig.max_records(1).spill_to_disk_when_full())),
        {"spark.sql.shuffle.partitions": "1"})
    try:
        for q, _ in queries.values():
            q.processAllAvailable()
    finally:
        for q, _ in queries.values():
            q.stop()
    stop_session()
    return {k: ckpt for k, (_, ckpt) in queries.items()}


@pytest.fixture(scope="module")
def fresh(checkpoints: dict[str, Path]) -> SparkSession:
    """A new SparkContext that never ran a query (a setting differs, so the shared one is replaced)."""
    return sluice_session(conf={"spark.executorEnv.SLUICE_TEST": "inspect"})


def batch_times(ckpt: Path) -> dict[int, int]:
    """Batch id -> batch timestamp (ms), from the offset log (its second line is the metadata)."""
    out = {}
    for f in (ckpt / "offsets").iterdir():
        if f.name.isdigit():
            out[int(f.name)] = json.loads(f.read_text().splitlines()[1])["batchTimestampMs"]
    return out


def millis(col: str) -> Any:
    return F.unix_millis(col)


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_until_window_closes(fresh: SparkSession, checkpoints: dict[str, Path], provider: str) -> None:
    state = inspect(fresh, str(checkpoints[f"window/{provider}"]))
    assert isinstance(state, SluiceState)
    assert state.next_watermark == T0 + timedelta(seconds=WINDOW_WATERMARK_S)
    assert state.watermark == T0 + timedelta(seconds=WINDOW_WATERMARK_S)  # the no-data batch's
    assert state.state_store_provider == PROVIDERS[provider]
    [op] = state.suppress
    assert (op.operator_id, op.name, op.mode, op.limit_ms) == (1000, "final counts", "until_window_closes", None)
    assert op.buffer == {"max_records": None, "max_bytes": None, "when_full": "shut_down"}
    got = {(r[0], r[1], r[2], r[3], r[4], r[5]) for r in op.rows.select(
        millis("window.end"), "user", "count", millis("buffer_time"), millis("due_at"), "due_next_batch").collect()}
    assert got == expected_window_rows()
    assert {r.key.user for r in op.rows.select("key").collect()} == {u for _, u, *_ in expected_window_rows()}
    assert op.rows.filter("spilled").count() == 0
    assert op.stream_time == {}
    text = str(state)
    assert "until_window_closes" in text and "final counts" in text and "2024-01-01 00:02:00" in text

    if provider == "window_store":
        [ws] = state.window_stores
        assert (ws.operator_id, ws.operator_name, ws.retention_ms) == (0, "stateStoreSave", RETENTION_MS)
        # The aggregation keeps the windows the watermark has not closed, in one segment per start.
        per_start: dict[int, int] = {}
        for end, *_ in expected_window_rows():
            per_start[end - 60_000] = per_start.get(end - 60_000, 0) + 1
        stream_time = max(ms(int(s // 60) * 60) for b in WINDOW_INPUT for s, _ in b)
        got_segments = {(r[0], r[1], r[2], r[3], r[4]) for r in ws.segments.select(
            "partition", millis("window_start"), "rows", millis("stream_time"), millis("expires_at")).collect()}
        assert got_segments == {(0, s, n, stream_time, s + RETENTION_MS) for s, n in per_start.items()}
    else:
        assert state.window_stores == []


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_until_time_limit(fresh: SparkSession, checkpoints: dict[str, Path], provider: str) -> None:
    state = inspect(fresh, str(checkpoints[f"limit/{provider}"]))
    [op] = state.suppress
    assert (op.mode, op.limit_ms, op.name) == ("until_time_limit", LIMIT_S * 1000, None)
    assert op.buffer == {"max_records": 100, "max_bytes": None, "when_full": "emit_early"}
    rows, stream_time = expected_limit_rows()
    got = {(r[0], r[1], r[2], r[3], r[4], r[5]) for r in op.rows.select(
        "user", millis("ts"), "n", millis("buffer_time"), millis("due_at"), "due_next_batch").collect()}
    assert got == rows
    assert {p: int(t.timestamp() * 1000) for p, t in op.stream_time.items()} == {0: stream_time}
    assert state.watermark is None and state.next_watermark is None


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_emission_cache(fresh: SparkSession, checkpoints: dict[str, Path], provider: str) -> None:
    ckpt = checkpoints[f"cache/{provider}"]
    state = inspect(fresh, str(ckpt))
    assert state.suppress == []
    [cache] = state.emit_caches
    assert (cache.operator_id, cache.interval_ms) == (2000, HOUR_MS)
    entered = batch_times(ckpt)[0]  # every key first updated in batch 0
    counts: dict[str, int] = {}
    for batch in CACHE_INPUT:
        for _, user in batch:
            counts[user] = counts.get(user, 0) + 1
    got = {(r[0], r[1], r[2], r[3]) for r in cache.rows.select(
        "user", "count", millis("insert_time"), millis("due_at")).collect()}
    assert got == {(u, n, entered, entered + HOUR_MS) for u, n in counts.items()}
    assert sorted(cache.rows.columns) == sorted(["user", "count", "insert_time", "due_at", "partition"])
    assert "emission cache 2000" in str(state)


def test_until_wall_clock_time_limit(fresh: SparkSession, checkpoints: dict[str, Path]) -> None:
    ckpt = checkpoints["wall"]
    batch = batch_times(ckpt)
    entered = {"a": batch[0], "b": batch[0], "c": batch[1]}  # the batch time a key was first buffered
    now = datetime.fromtimestamp((batch[0] + HOUR_MS) / 1000, tz=timezone.utc)
    state = inspect(fresh, str(ckpt), now=now)
    [op] = state.suppress
    assert (op.mode, op.limit_ms) == ("until_wall_clock_time_limit", HOUR_MS)
    got = {(r[0], r[1], r[2], r[3], r[4]) for r in op.rows.select(
        "user", "count", millis("buffer_time"), millis("due_at"), "due_next_batch").collect()}
    assert got == {("a", 2, entered["a"], entered["a"] + HOUR_MS, True),
                   ("b", 1, entered["b"], entered["b"] + HOUR_MS, True),
                   ("c", 1, entered["c"], entered["c"] + HOUR_MS, batch[1] <= batch[0])}


def test_spilled_rows_are_listed(fresh: SparkSession, checkpoints: dict[str, Path]) -> None:
    state = inspect(fresh, str(checkpoints["spill"]))
    [op] = state.suppress
    assert op.buffer == {"max_records": 1, "max_bytes": None, "when_full": "spill_to_disk"}
    # Batch 0 buffers a, b, c (ends 60, 120, 180 s) and spills the newest two as they arrive;
    # batch 1 (watermark 115 s) puts d (end 180) beside a, which is due but leaves only once the
    # batch's rows are all in, so d is spilled too; then a is emitted; watermark 120 s emits b.
    got = {(r[0], r[1], r[2], r[3]) for r in op.rows.select(
        "user", millis("window.end"), millis("due_at"), "spilled").collect()}
    assert got == {("c", ms(180), ms(180), True), ("d", ms(180), ms(180), True)}
    assert state.next_watermark == T0 + timedelta(seconds=120)


def test_checkpoint_without_state(fresh: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="no checkpoint"):
        inspect(fresh, str(tmp_path / "missing"))
