"""Late records kept: ``Suppressed.until_window_closes(...).with_late_records(path, format)`` writes
every input record dropped as late (its window closed by the grace period or by Spark's watermark)
under ``path/batch_id=<id>/`` instead of only counting it, exactly once across restarts and replays,
with as many records per batch as the batch's ``lateRecordDropTotal``.

Driven by ``sluice.testing.PipelineDriver``: rows piped per micro-batch, the wall clock the test's.
Event times are seconds after T0; windows are one minute, the watermark delay ten minutes.
"""
from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sluice import BufferConfig, SluiceSuppressError, Suppressed, suppress
from sluice.testing import PipelineDriver
from support.session import session_conf

pytestmark = pytest.mark.every_minor

T0 = datetime(2024, 1, 1)
DELAY = "10 minutes"
GRACE = timedelta(seconds=30)
SCHEMA = "ts timestamp, user string"
PROVIDERS = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "record_cache": "sluice.cache.CachingStateStoreProvider",
}
# Session state is read by prefix scans, which the in-memory window store serves too.
SESSION_PROVIDERS = {**PROVIDERS, "windowstore": "sluice.windowstore.InMemoryWindowStoreProvider"}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def final_results(late: Path | None, grace: timedelta | None = GRACE, fmt: str = "parquet",
                  options: dict[str, str] | None = None, slide: str | None = None,
                  buffer: Any = None) -> Any:
    suppressed = Suppressed.until_window_closes(buffer or BufferConfig.unbounded(), grace=grace)
    if late is not None:
        suppressed = suppressed.with_late_records(str(late), fmt, options)

    def pipeline(events: DataFrame) -> DataFrame:
        window = F.window("ts", "1 minute") if slide is None else F.window("ts", "1 minute", slide)
        counts = events.withWatermark("ts", DELAY).groupBy(window, "user").count()
        return suppress(counts, suppressed)

    return pipeline


def feed(driver: PipelineDriver, *events: tuple[float, str]) -> None:
    """One micro-batch of `events`, then one more trigger (the batch without input that emits what
    the first one's watermark closed)."""
    driver.pipe_input([(at(s), u) for s, u in events])
    driver.advance_wall_clock(timedelta(seconds=1))
    driver.advance_wall_clock(timedelta(seconds=1))


def finals(driver: PipelineDriver) -> Counter:
    return Counter((r.window.start, r.user, r["count"]) for r in driver.output())


def kept(spark: SparkSession, path: Path, fmt: str = "parquet") -> list[tuple]:
    """The kept late records: (batch id, window start, user, event time, late_by_ms)."""
    if not path.exists():
        return []
    rows = spark.read.format(fmt).schema(
        "window struct<start: timestamp, end: timestamp>, user string, ts timestamp, late_by_ms long, batch_id long"
    ).load(str(path)).collect() if fmt != "parquet" else spark.read.parquet(str(path)).collect()
    return sorted((r.batch_id, r.window.start, r.user, r.ts, r.late_by_ms) for r in rows)


def late_metric_by_batch(driver: PipelineDriver, name: str = "numRowsDroppedByWatermark") -> dict[int, int]:
    """Per batch with late drops, the metric `name` summed over the state operators: suppress's on
    the buffered plan, the aggregation's state save on the fused one."""
    return {b.batch_id: b.metric(name) for b in driver.batches if b.progress is not None and b.metric(name)}


def kept_by_batch(records: list[tuple]) -> dict[int, int]:
    return dict(Counter(r[0] for r in records))


@pytest.fixture(params=sorted(PROVIDERS))
def provider(request: pytest.FixtureRequest, spark: SparkSession) -> Any:
    with session_conf(spark, {"spark.sql.streaming.stateStore.providerClass": PROVIDERS[request.param]}):
        yield request.param


def test_grace_late_records_kept_exactly_once_across_a_restart(spark: SparkSession, tmp_path: Path,
                                                               provider: str) -> None:
    """With a grace below the delay: the records for windows stream time closed are written with
    their window, key, event time and lateness, one row each, in the batch that dropped them; the
    finals are those of the same query without late records; a clean restart changes nothing."""
    late = tmp_path / "late"
    with PipelineDriver(spark, final_results(late), SCHEMA, checkpoint=tmp_path / "ckpt") as driver:
        feed(driver, (10, "a"), (20, "b"), (40, "a"))
        feed(driver, (95, "a"))  # stream time 95: [0, 60) closes (60 + 30 <= 95)
        feed(driver, (50, "a"), (55, "c"))  # late: [0, 60) closed 5 s of stream time ago
        feed(driver, (100, "b"))
        driver.restart()
        feed(driver, (151, "c"))  # stream time 151: [60, 120) closes
        feed(driver, (70, "d"))  # late by 1 s
        feed(driver, (800, "e"))
        got = finals(driver)
        metric = late_metric_by_batch(driver)
        assert late_metric_by_batch(driver, "lateRecordDropTotal") == metric
    assert got == Counter({(at(0), "a", 2): 1, (at(0), "b", 1): 1, (at(60), "a", 1): 1, (at(60), "b", 1): 1,
                           (at(120), "c", 1): 1})
    records = kept(spark, late)
    assert [r[1:] for r in records] == [(at(0), "a", at(50), 5000), (at(0), "c", at(55), 5000),
                                        (at(60), "d", at(70), 1000)]
    assert kept_by_batch(records) == metric
    assert len(metric) == 2


def test_a_replayed_batch_keeps_its_late_records_once(spark: SparkSession, tmp_path: Path) -> None:
    """The batch with late records fails before it commits (as a killed driver would) and replays
    on restart: its late records are in place once, and the metric counts them once."""
    late = tmp_path / "late"
    with PipelineDriver(spark, final_results(late), SCHEMA, checkpoint=tmp_path / "ckpt") as driver:
        feed(driver, (10, "a"), (40, "a"))
        feed(driver, (95, "a"))
        driver.fail_next_batch()
        driver.pipe_input([(at(50), "a"), (at(20), "b"), (at(30), "b")])
        failed = driver.advance_wall_clock(timedelta(seconds=1))
        assert failed == []
        assert driver.batches[-1].failed
        replayed = driver.batches[-1].batch_id
        driver.restart()
        assert driver.batches[-1].replay and driver.batches[-1].batch_id == replayed
        feed(driver, (300, "z"))
        metric = late_metric_by_batch(driver)
    records = kept(spark, late)
    assert [r[1:] for r in records] == [(at(0), "a", at(50), 5000), (at(0), "b", at(20), 5000),
                                        (at(0), "b", at(30), 5000)]
    assert {r[0] for r in records} == {replayed}
    assert metric == {replayed: 3}


@pytest.mark.parametrize("fused", ["true", "false"])
def test_without_grace_the_records_spark_would_drop_are_kept(spark: SparkSession, tmp_path: Path, fused: str) -> None:
    """Without a grace the window closes at the watermark: the records Spark's aggregation would drop
    as late are kept, counted as its late drops, and the finals equal the same query's without late
    records and the late drops its count; on the fused plan (the default) and on suppress's buffer."""
    results, drops = [], []
    late = tmp_path / "late"
    with session_conf(spark, {"spark.sluice.suppress.fused": fused}):
        for name, path in [("plain", None), ("kept", late)]:
            with PipelineDriver(spark, final_results(path, grace=None), SCHEMA, checkpoint=tmp_path / name) as driver:
                feed(driver, (10, "a"), (20, "b"))
                feed(driver, (700, "a"))  # watermark 100 s: [0, 60) closes
                feed(driver, (30, "a"), (110, "b"), (61, "c"))  # 30: late; 110 and 61: on time
                feed(driver, (1000, "x"))
                results.append(finals(driver))
                drops.append(late_metric_by_batch(driver))
                names = {op["operatorName"] for b in driver.batches for op in b.operators}
                assert ("suppress" in names) == (fused == "false")
    metric = drops[1]
    assert drops[0] == drops[1]
    assert results[0] == results[1]
    assert results[1][(at(60), "b", 1)] == 1 and results[1][(at(60), "c", 1)] == 1
    records = kept(spark, late)
    assert [r[1:] for r in records] == [(at(0), "a", at(30), 40_000)]
    assert kept_by_batch(records) == metric


def test_a_spilling_buffer_keeps_the_same_late_records(spark: SparkSession, tmp_path: Path) -> None:
    """A bounded buffer that spills to disk (one row in memory): the same finals and late records as
    the unbounded buffer."""
    late = tmp_path / "late"
    pipeline = final_results(late, buffer=BufferConfig.max_records(1).spill_to_disk_when_full())
    with PipelineDriver(spark, pipeline, SCHEMA, checkpoint=tmp_path / "ckpt") as driver:
        feed(driver, (10, "a"), (20, "b"), (40, "a"))
        feed(driver, (95, "a"))
        feed(driver, (50, "a"), (55, "c"))
        feed(driver, (300, "z"))
        got = finals(driver)
        metric = late_metric_by_batch(driver)
    assert got == Counter({(at(0), "a", 2): 1, (at(0), "b", 1): 1, (at(60), "a", 1): 1})
    records = kept(spark, late)
    assert [r[1:] for r in records] == [(at(0), "a", at(50), 5000), (at(0), "c", at(55), 5000)]
    assert kept_by_batch(records) == metric


def test_hopping_window_keeps_a_record_once_per_closed_window(spark: SparkSession, tmp_path: Path) -> None:
    """A record assigned to two windows, one closed: one late row (the closed window's); the other
    window counts it."""
    late = tmp_path / "late"
    pipeline = final_results(late, grace=timedelta(seconds=20), slide="30 seconds")
    with PipelineDriver(spark, pipeline, SCHEMA, checkpoint=tmp_path / "ckpt") as driver:
        feed(driver, (5, "a"), (35, "a"))
        feed(driver, (55, "b"))  # stream time 55: [-30, 30) closes (30 + 20 <= 55), [0, 60) open
        feed(driver, (20, "a"))  # late for [-30, 30), on time for [0, 60)
        feed(driver, (200, "z"))
        got = finals(driver)
    assert [r[1:] for r in kept(spark, late)] == [(at(-30), "a", at(20), 5000)]
    assert got[(at(0), "a", 3)] == 1


def test_json_with_options(spark: SparkSession, tmp_path: Path) -> None:
    """Any Spark file format with its write options: gzip-compressed JSON here."""
    late = tmp_path / "late"
    with PipelineDriver(spark, final_results(late, fmt="json", options={"compression": "gzip"}), SCHEMA,
                        checkpoint=tmp_path / "ckpt") as driver:
        feed(driver, (10, "a"))
        feed(driver, (95, "a"))
        feed(driver, (50, "a"))
    files = sorted(p.name for p in late.rglob("part-*"))
    assert files and all(name.endswith(".json.gz") for name in files)
    assert [r[1:] for r in kept(spark, late, "json")] == [(at(0), "a", at(50), 5000)]


def test_misuse_fails_when_the_dataframe_is_built(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="until_time_limit drops no record as late"):
        Suppressed.until_time_limit(1, BufferConfig.unbounded()).with_late_records(str(tmp_path))
    events = spark.readStream.format("rate").load().select(F.col("timestamp").alias("ts"),
                                                            F.lit("u").alias("user"))
    counts = events.withWatermark("ts", DELAY).groupBy(F.window("ts", "1 minute"), "user").count()
    final = Suppressed.until_window_closes(BufferConfig.unbounded())
    with pytest.raises(SluiceSuppressError, match="Spark finds no data source 'nope'"):
        suppress(counts, final.with_late_records(str(tmp_path), "nope"))
    with pytest.raises(SluiceSuppressError, match="format 'text' cannot hold column window"):
        suppress(counts, final.with_late_records(str(tmp_path), "text"))
    sessions = events.withWatermark("ts", DELAY).groupBy(F.session_window("ts", "1 minute"), "user").count()
    with pytest.raises(SluiceSuppressError, match="format 'text' cannot hold column"):
        suppress(sessions, final.with_late_records(str(tmp_path), "text"))
    assert suppress(sessions, final.with_late_records(str(tmp_path))).isStreaming
    assert suppress(sessions, Suppressed.until_window_closes(BufferConfig.unbounded(), grace=GRACE)
                    .with_late_records(str(tmp_path))).isStreaming
    clash = events.withColumn("late_by_ms", F.lit(1)).withWatermark("ts", DELAY)
    with pytest.raises(SluiceSuppressError, match="column named late_by_ms"):
        suppress(clash.groupBy(F.window("ts", "1 minute"), "user", "late_by_ms").count(),
                 final.with_late_records(str(tmp_path)))


@pytest.mark.soak
@pytest.mark.parametrize("query", ["windows", "sessions"])
@pytest.mark.parametrize("provider_name", ["hdfs", "rocksdb"])
def test_killed_driver_keeps_each_late_record_once(spark: SparkSession, tmp_path: Path, provider_name: str,
                                                   query: str) -> None:
    """SIGKILL the query's process (driver JVM included) mid-stream, restart it here on the same
    checkpoint: every late record is kept exactly once and every final result arrives once. The
    query: hourly windows closed at the watermark, or 20-minute sessions with a grace of 2 minutes
    below the 4-hour delay (their late records decided by the session update, from staged ones)."""
    import json
    import os

    from support.children import kill_after_batches
    from support.inputs import HOURLY_USERS, hourly_finals, write_hourly_files
    from support.late_records_kill_child import final_results, sink
    from support.sinks import drain_to_files, emitted_finals

    def iso(seconds: float) -> str:
        return at(seconds).strftime("%Y-%m-%d %H:%M:%S")

    src, ckpt, out, late = tmp_path / "in", tmp_path / "ckpt", tmp_path / "out", tmp_path / "late"
    src.mkdir()
    out.mkdir()
    hours = 8
    write_hourly_files(src, hours, iso)
    # File h (h >= 4) also has a record of user z for hour h - 4, late whichever batch takes it. Spark's
    # late-events watermark for file h's batch is file h - 2's largest event time minus the delay
    # (h - 2 hours and 6 to 8 minutes) while each batch takes one file; but after the kill a batch can
    # take two: killed between the file source's log entry for a batch and the offset log's, the
    # restarted query reads the logged file and the next one together, and the late-events watermark
    # of that batch and the next lags an hour. Hour h - 4 ends before it even then; hour h - 3 would not.
    # For the sessions, z's record closes its own session [t, t + 20 min] by the grace (stream time
    # is at least hour h - 2 then) and never under the 4-hour watermark: the session update keeps it.
    for h in range(4, hours):
        path = src / f"{h:03d}.json"
        stamp = os.stat(path).st_mtime
        with open(path, "a") as f:
            f.write(json.dumps({"ts": iso((h - 4) * 3600 + 100), "user": "z", "v": 1}) + "\n")
        os.utime(path, (stamp, stamp))

    kill_after_batches("late_records_kill_child.py", [str(src), str(ckpt), str(out), str(late),
                                                      PROVIDERS[provider_name], query], out, batches=5)
    assert len(list(out.glob("*.json"))) < 2 * hours  # killed mid-stream
    drain_to_files(spark, final_results(spark, str(src), str(late), query), sink(str(out), query), ckpt,
                   {"spark.sql.streaming.stateStore.providerClass": PROVIDERS[provider_name]})

    records = spark.read.parquet(str(late)).collect()
    if query == "windows":
        assert emitted_finals(out) == hourly_finals(hours, lambda h: at(h * 3600).isoformat())
        assert sorted((r.window.start, r.user, r.ts) for r in records) == [
            (at((h - 4) * 3600), "z", at((h - 4) * 3600 + 100)) for h in range(4, hours)]
    else:
        # Each user's session of hour h starts at its first event (write_hourly_files: minute 15 + i).
        expected: Counter = Counter()
        for h in range(hours - 1):
            users = HOURLY_USERS[: 2 + h % 3]
            for user in set(users):
                expected[(at(h * 3600 + 900 + users.index(user) * 60).isoformat(), user, users.count(user))] = 1
        assert emitted_finals(out) == expected
        assert sorted((r.session_window.start, r.user, r.ts) for r in records) == [
            (at((h - 4) * 3600 + 100), "z", at((h - 4) * 3600 + 100)) for h in range(4, hours)]


def test_spark_connect_message_carries_late_records(spark: SparkSession) -> None:
    """The Connect client's message decodes, on the server side, to the same late records."""
    from sluice import _handles
    from sluice._connect import encode

    wire = (Suppressed.until_window_closes(BufferConfig.unbounded())
            .with_late_records("/late", "json", {"compression": "gzip", "dateFormat": "yyyy"})._wire())
    message = _handles.jvm(spark).sluice.connect.SuppressRelation.decode(bytearray(encode(b"", **wire)))
    late = message.suppressed().lateRecords().get()
    assert (late.path(), late.format()) == ("/late", "json")
    assert late.options().size() == 2 and late.options().apply("compression") == "gzip"
    assert message.suppressed().lateRecords().get().describe() == "late records to /late (json)"


@pytest.mark.parametrize("grace", [None, GRACE], ids=["fused", "buffered"])
def test_late_records_turned_on_and_off_on_a_running_checkpoint(spark: SparkSession, tmp_path: Path,
                                                                grace: timedelta | None) -> None:
    """Keeping late records changes no state: a checkpoint restarts with them turned on, and again
    with them off; while on, that run's late records are kept, and the finals are the same."""
    late = tmp_path / "late"
    keep = {"on": False}

    def pipeline(events: DataFrame) -> DataFrame:
        return final_results(late if keep["on"] else None, grace=grace)(events)

    with PipelineDriver(spark, pipeline, SCHEMA, checkpoint=tmp_path / "ckpt") as driver:
        feed(driver, (10, "a"), (20, "b"))
        feed(driver, (700, "a"))  # closes [0, 60) with or without the grace
        keep["on"] = True
        driver.restart()
        feed(driver, (30, "a"))  # late: kept
        keep["on"] = False
        driver.restart()
        feed(driver, (40, "b"))  # late: counted only
        feed(driver, (2000, "z"))
        got = finals(driver)
    assert got[(at(0), "a", 1)] == 1 and got[(at(0), "b", 1)] == 1 and got[(at(660), "a", 1)] == 1
    assert [r[1:4] for r in kept(spark, late)] == [(at(0), "a", at(30))]


GAP = timedelta(seconds=30)


def session_results(late: Path | None, grace: timedelta | None = None) -> Any:
    suppressed = Suppressed.until_window_closes(BufferConfig.unbounded(), grace=grace)
    if late is not None:
        suppressed = suppressed.with_late_records(str(late))

    def pipeline(events: DataFrame) -> DataFrame:
        sessions = events.withWatermark("ts", DELAY).groupBy(F.session_window("ts", "30 seconds"), "user").count()
        return suppress(sessions, suppressed)

    return pipeline


def session_finals(driver: PipelineDriver) -> Counter:
    return Counter((r.session_window.start, r.session_window.end, r.user, r["count"]) for r in driver.output())


def kept_sessions(spark: SparkSession, path: Path) -> list[tuple]:
    """The kept late records of a session window: (batch id, event time, user, late_by_ms), each
    with its own session [ts, ts + gap] and no column the plan adds."""
    frame = spark.read.parquet(str(path))
    assert sorted(frame.columns) == ["batch_id", "late_by_ms", "session_window", "ts", "user"]
    rows = frame.collect()
    assert all(r.session_window.start == r.ts and r.session_window.end == r.ts + GAP for r in rows)
    return sorted((r.batch_id, r.ts, r.user, r.late_by_ms) for r in rows)


class SessionRun(NamedTuple):
    """What one run of a session script gave: its finals, per batch the late drops of every state
    operator and those of suppress, and the names of its state operators."""
    finals: Counter
    drops: dict[int, int]
    suppress_drops: dict[int, int]
    operators: set[str]


def play_sessions(spark: SparkSession, tmp_path: Path, conf: dict[str, str], script: list, late: Path,
                  grace: timedelta | None = None) -> list[SessionRun]:
    """`script` (per item, one micro-batch of events and the batches after it; None: a restart) run
    by the session query without late records and then with them kept in `late`."""
    runs = []
    with session_conf(spark, conf):
        for run, path in [("plain", None), ("kept", late)]:
            with PipelineDriver(spark, session_results(path, grace), SCHEMA, checkpoint=tmp_path / run) as driver:
                for events in script:
                    if events is None:
                        driver.restart()
                    else:
                        feed(driver, *events)
                runs.append(SessionRun(session_finals(driver), late_metric_by_batch(driver),
                                       late_metric_by_batch(driver, "lateRecordDropTotal"),
                                       {op["operatorName"] for b in driver.batches for op in b.operators}))
    return runs


def assert_kept_sessions(spark: SparkSession, late: Path, runs: list[SessionRun], expected_finals: set[tuple],
                         expected_kept: list[tuple]) -> None:
    """Both runs gave `expected_finals` ((start, end, user, count), seconds) and the same late drops per
    batch, in two batches; the records kept, (event time, user, late_by_ms), are `expected_kept`, as
    many per batch as the batch's late drops."""
    plain, kept = runs
    assert plain.finals == kept.finals == Counter({(at(s), at(e), u, n): 1 for s, e, u, n in expected_finals})
    records = kept_sessions(spark, late)
    assert [r[1:] for r in records] == [(at(t), u, by) for t, u, by in expected_kept]
    assert kept_by_batch(records) == kept.drops
    assert len(kept.drops) == 2
    assert plain.drops == kept.drops


# (name, spark.sluice.suppress.fused): fused final results and suppress's buffer, each closing a
# session at the watermark.
SESSION_PLANS = [("fused", "true"), ("buffered", "false")]


@pytest.mark.parametrize("plan", SESSION_PLANS, ids=[p[0] for p in SESSION_PLANS])
@pytest.mark.parametrize("provider_name", ["hdfs", "rocksdb"])
def test_session_window_late_records_kept_exactly_once_across_a_restart(spark: SparkSession, tmp_path: Path,
                                                                        plan: tuple, provider_name: str) -> None:
    """Session windows (gap 30 s): a record whose own session [ts, ts + 30 s] had closed before its
    batch is kept with its lateness, in the batch that dropped it, once across a restart; per batch
    the records kept are the late-drop count; the finals are those of the same query without late
    records."""
    name, fused = plan
    # Closed at the watermark: 10 minutes behind the largest event time.
    script = [[(10, "a"), (20, "b")],
              [(700, "a")],  # watermark 100 s: a [10, 40] and b [20, 50] close
              [(30, "a"), (65, "c"), (110, "b"), (75, "d")],  # 30 and 65: late; 110 and 75: on time
              None,  # restart
              [(1000, "x")],  # watermark 400 s
              [(350, "e")],  # late by 20 s
              [(2000, "y")]]
    expected_finals = {(10, 40, "a", 1), (20, 50, "b", 1), (110, 140, "b", 1), (75, 105, "d", 1),
                       (700, 730, "a", 1), (1000, 1030, "x", 1)}
    expected_kept = [(30, "a", 40_000), (65, "c", 5_000), (350, "e", 20_000)]
    late = tmp_path / "late"
    conf = {"spark.sluice.suppress.fused": fused,
            "spark.sql.streaming.stateStore.providerClass": PROVIDERS[provider_name]}
    runs = play_sessions(spark, tmp_path, conf, script, late)
    assert runs[1].suppress_drops == (runs[1].drops if name != "fused" else {})
    assert all(("suppress" in r.operators) == (name != "fused") for r in runs)
    assert_kept_sessions(spark, late, runs, expected_finals, expected_kept)


@pytest.mark.parametrize("provider_name", ["hdfs", "rocksdb", "record_cache", "windowstore"])
def test_session_window_with_grace_judges_a_record_by_the_session_it_merges_into(
        spark: SparkSession, tmp_path: Path, provider_name: str) -> None:
    """Session windows (gap 30 s) with a grace of 10 s below the 10-minute delay, as Kafka Streams'
    SessionWindows.ofInactivityGapAndGrace: a session closes once stream time passes its end + 10 s.
    A record is late when the session it merges into had closed: then it is kept (with the
    lateness of that session), changes no state, and a later on-time record of the session's key
    merges with the session as it was; a record whose own session had closed but that merges into
    an open session counts. Across a restart, per batch the records kept are the late-drop count,
    and the finals are those of the same query without late records."""
    grace = timedelta(seconds=10)
    # Each batch closes the sessions ending at or before the largest event time of the batches
    # before it, minus the grace (Spark's watermark is that time minus the delay).
    script = [[(1040, "f"), (1010, "a"), (1020, "b"), (1035, "q"), (1060, "z")],
              [(1095, "z")],  # closes a [1010, 1040], b, f [1040, 1070], q (ends <= 1085)
              [(1015, "a"),  # into a's closed session [1010, 1045]: late by 1085 - 1045 = 40 s
               (1040, "z"),  # own session [1040, 1070] closed, but it joins z's open [1060, 1090]
               (1052, "c"),  # its own session [1052, 1082], closed: late by 3 s
               (1041, "f")],  # into f's closed [1040, 1071]: late by 14 s, f stays [1040, 1070]
              None,  # restart
              [(1069, "f"), (1700, "y")],  # on time: f [1040, 1099] has 1040 and 1069, not 1041
              [(1030, "d"),  # own session [1030, 1060] under Spark's watermark (1100): late by 630 s
               (1500, "a"),  # own session [1500, 1530], closed (<= 1690): late by 160 s
               (1685, "e")],
              [(3000, "x")]]
    expected_finals = {(1010, 1040, "a", 1), (1020, 1050, "b", 1), (1040, 1070, "f", 1), (1035, 1065, "q", 1),
                       (1040, 1090, "z", 2), (1095, 1125, "z", 1),
                       (1040, 1099, "f", 2), (1700, 1730, "y", 1), (1685, 1715, "e", 1)}
    expected_kept = [(1015, "a", 40_000), (1041, "f", 14_000), (1052, "c", 3_000),
                     (1030, "d", 630_000), (1500, "a", 160_000)]
    late = tmp_path / "late"
    runs = play_sessions(spark, tmp_path, {"spark.sql.streaming.stateStore.providerClass":
                                           SESSION_PROVIDERS[provider_name]}, script, late, grace)
    assert runs[1].suppress_drops == runs[1].drops
    assert_kept_sessions(spark, late, runs, expected_finals, expected_kept)
    # The staged candidates of committed batches are gone.
    assert not any(p.is_file() for p in (late / "_sluice_late_candidates").rglob("*"))
