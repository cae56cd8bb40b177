"""Session windows in update mode (the last of KIP-328's scenarios) through the public API: the
user's ordinary `groupBy(F.session_window(...), ...)`, written in update mode with sluice's
extensions on, on real queries, checkpoints and each state store provider.

Each batch emits the sessions it changed; a session merged into another (or grown, so its window
no longer exists) leaves as a retraction: its key and old window with null aggregates, the
tombstone Kafka Streams forwards. A table keyed by (key, session window) that applies the rows in
order (upsert a row, delete on a retraction) must end exactly as Spark's own append mode, which
emits each session once, final. Input arrives one JSON file per micro-batch.
"""
from __future__ import annotations

import json
import os
import random
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from sluice import BufferConfig, Suppressed, suppress
from sluice.input import BYTES_METRIC
from support.children import kill_after_batches
from support.session import session_conf
from support.sessions import BATCHES, GAP, append_mode_finals, feed_all, is_retraction, key, sessions, table_of
from support.sinks import drain_to_files
from support.suppress import PROVIDERS, CrashOnce, Run, at

pytestmark = pytest.mark.sessions

# `run` and `provider`: tests/sessions/conftest.py


def test_update_mode_emits_changes_and_retracts_merged_sessions(spark: SparkSession, run: Run, provider: str,
                                                                tmp_path: Path) -> None:
    run.start(sessions(run.events()))
    feed_all(run, BATCHES)
    by_batch = [sorted((key(r), r["n"], r["total"]) for r in run.batches[b]) for b in sorted(run.batches)
                if run.batches[b]]  # batches without input (the watermark moved) emit nothing
    a0, a10, a15 = ("a", at(0), at(6)), ("a", at(10), at(15)), ("a", at(0), at(15))
    assert by_batch[0] == [(a0, 2, 2), (("b", at(3), at(8)), 1, 1)]
    assert by_batch[1] == [(a10, 1, 2)]                                    # only what changed
    assert by_batch[2] == sorted([(a0, None, None), (a10, None, None), (a15, 4, 7)])
    # The table the changes build is Spark's own append-mode result for the same input.
    assert table_of(run) == append_mode_finals(spark, run.src, tmp_path)
    progress = run.query.recentProgress
    ops = [op for p in progress for op in p["stateOperators"] if op["operatorName"] == "sluiceSessionUpdate"]
    assert ops and ops[-1]["numRowsTotal"] == 1  # only c's latest session is open; the rest evicted


def test_late_events_are_dropped_and_counted_in_the_progress(spark: SparkSession, run: Run, provider: str) -> None:
    """An event whose own session ended at or before the watermark changes nothing and is counted
    as the session update's numRowsDroppedByWatermark, where Spark's own session save counts it."""
    run.start(sessions(run.events()))
    run.feed((0, "a"), (1, "b"))
    run.feed((100, "c"))  # watermark 90 s: a's and b's sessions close
    run.feed((20, "a"), (30, "b"), (95, "c"))  # a [20, 25) and b [30, 35): late; c on time
    emitted = [sorted((key(r), is_retraction(r)) for r in run.batches[b]) for b in sorted(run.batches) if run.batches[b]]
    assert emitted == [[(("a", at(0), at(5)), False), (("b", at(1), at(6)), False)],
                       [(("c", at(100), at(105)), False)],
                       [(("c", at(95), at(105)), False), (("c", at(100), at(105)), True)]]  # c's merged: no a, no b
    dropped = [(p["numInputRows"], op["numRowsDroppedByWatermark"]) for p in run.query.recentProgress
               for op in p["stateOperators"] if op["operatorName"] == "sluiceSessionUpdate"]
    assert [d for d in dropped if d[1]] == [(3, 2)]


def test_random_sequences_build_the_append_mode_result(spark: SparkSession, run: Run, tmp_path: Path) -> None:
    """Random arrivals, late ones and bridging ones included, over two partitions."""
    rng = random.Random(7)
    batches, t = [], 0
    for _ in range(8):
        batch = []
        for _ in range(rng.randint(1, 6)):
            batch.append((max(0, t + rng.randint(-12, 6)), rng.choice("xyz"), rng.randint(1, 9)))
        t += rng.randint(2, 9)
        batches.append(batch)
    batches.append([(t + 100, "x", 1)])  # closes every session
    run.start(sessions(run.events()))
    feed_all(run, batches)
    retractions = sum(is_retraction(r) for r in run.rows())
    assert retractions > 0, "the sequence has no bridging event: choose another seed"
    assert table_of(run) == append_mode_finals(spark, run.src, tmp_path)


def test_restart_and_replayed_batch(spark: SparkSession, run: Run, provider: str, tmp_path: Path) -> None:
    """A query stopped and restarted on its checkpoint continues its sessions; a batch that failed
    in the sink after the operator committed is replayed with exactly the rows it emitted before."""
    crash = CrashOnce(when=lambda rows: any(is_retraction(r) for r in rows))
    df = sessions(run.events())
    run.start(df, fail_when=crash)
    feed_all(run, BATCHES[:2])
    run.stop()
    run.start(df, fail_when=crash)
    with pytest.raises(StreamingQueryException, match="simulated crash"):
        run.feed(*BATCHES[2])
    run.query = None
    first = [rows for b, rows in run.attempts if b == crash.batch][0]
    run.start(df)
    run.query.processAllAvailable()
    assert Counter(map(str, run.batches[crash.batch])) == Counter(map(str, first))
    feed_all(run, BATCHES[3:])
    assert table_of(run) == append_mode_finals(spark, run.src, tmp_path)


def test_append_and_complete_modes_stay_spark_own(spark: SparkSession, run: Run) -> None:
    """Only update mode is sluice's: append mode plans Spark's own session operators."""
    q = (sessions(run.events()).writeStream.outputMode("append").format("memory").queryName("sessions_append")
         .option("checkpointLocation", str(run.ckpt)).start())
    try:
        run.write(*BATCHES[0])
        q.processAllAvailable()
        names = {op["operatorName"] for p in q.recentProgress for op in p["stateOperators"]}
        assert names == {"sessionWindowStateStoreSaveExec"}, names
    finally:
        q.stop()


# --- suppress over session windows ---------------------------------------------------------------

@pytest.fixture(params=["fused", "unfused"])
def fused(request: pytest.FixtureRequest, spark: SparkSession) -> Any:
    """until_window_closes(unbounded()) fused into the session aggregation (Spark's append-mode save
    in the update-mode query, the default) and unfused (sluice's session updates, then suppress)."""
    with session_conf(spark, {"spark.sluice.suppress.fused": str(request.param == "fused").lower()}):
        yield request.param


def operator_names(run: Run) -> set:
    return {op["operatorName"] for p in run.query.recentProgress for op in p["stateOperators"]}


LOCAL_MERGE_KEY = "spark.sql.streaming.sessionWindow.merge.sessions.in.local.partition"


def merges_below_the_shuffle(plan: str) -> bool:
    """Whether a session merge runs below the physical plan's first shuffle (explain() prints a
    node's children below it)."""
    lines = plan.splitlines()
    exchange = next(i for i, line in enumerate(lines) if "Exchange hashpartitioning" in line)
    return any("MergingSessions" in line for line in lines[exchange + 1:])


@pytest.mark.parametrize("setting", [None, "false"], ids=["unset", "off"])
def test_sessions_merge_in_each_partition_before_the_shuffle_unless_spark_setting_is_off(
        spark: SparkSession, run: Run, provider: str, fused: str, tmp_path: Path, setting: str | None) -> None:
    """sluice merges each input partition's sessions before the shuffle unless Spark's setting says
    not to (Spark's own default is not to); the sessions are the same either way."""
    with session_conf(spark, {LOCAL_MERGE_KEY: setting} if setting is not None else {}):
        df = sessions(run.events())
        run.start(suppress(df, Suppressed.until_window_closes(BufferConfig.unbounded())) if fused == "fused" else df)
        feed_all(run, BATCHES)
        plan = run.query._jsq.explainInternal(False)
    assert merges_below_the_shuffle(plan) == (setting != "false"), plan
    assert "MergingSessions" in plan
    with session_conf(spark, {LOCAL_MERGE_KEY: "false"}):  # Spark's own plan for the reference
        expected = append_mode_finals(spark, run.src, tmp_path)
    if fused == "fused":
        got = {key(r): (r["n"], r["total"]) for r in run.rows()}
        assert len(got) == len(run.rows())  # each session once
        assert got == expected
    else:
        assert table_of(run) == expected


def test_kafka_streams_scenario_gives_its_final_sessions(spark: SparkSession, run: Run, provider: str,
                                                         fused: str) -> None:
    """Kafka Streams' own suppress scenario for sessions (gap 5, no grace): k1@0, k1@5, k1@1, k2@11,
    k1@5 (late), k1@30 give the finals [k1@0/5]=3 and [k2@11/11]=1. A Kafka session [start, end]
    ends at its last record; Spark's session window ends a gap after it ([0, 10) and [11, 16))."""
    counts = (run.events().withWatermark("ts", "0 seconds")
              .groupBy(F.session_window("ts", GAP), F.col("user").alias("k")).count())
    run.start(suppress(counts, Suppressed.until_window_closes(BufferConfig.unbounded())))
    for t, k in [(0, "k1"), (5, "k1"), (1, "k1"), (11, "k2"), (5, "k1"), (30, "k1")]:
        run.feed((t, k))
    finals = [(r["k"], r["session_window"]["start"].replace(tzinfo=None), r["session_window"]["end"].replace(tzinfo=None),
               r["count"]) for r in run.rows()]
    assert finals == [("k1", at(0), at(10), 3), ("k2", at(11), at(16), 1)]
    assert operator_names(run) == ({"sessionWindowStateStoreSaveExec"} if fused == "fused"
                                   else {"sluiceSessionUpdate", "suppress"})


def test_until_window_closes_emits_each_session_once_and_never_a_merged_one(
        spark: SparkSession, run: Run, provider: str, tmp_path: Path, fused: str) -> None:
    """One final row per session, across a restart; no row for a session later merged into another."""
    df = suppress(sessions(run.events()), Suppressed.until_window_closes(BufferConfig.unbounded()))
    run.start(df)
    feed_all(run, BATCHES[:3])
    run.stop()
    run.start(df)
    feed_all(run, BATCHES[3:])
    rows = run.rows()
    assert not any(is_retraction(r) for r in rows)
    finals = Counter((key(r), (r["n"], r["total"])) for r in rows)
    assert set(finals.values()) == {1}, finals
    assert dict(finals.keys()) == append_mode_finals(spark, run.src, tmp_path)
    assert ("a", at(0), at(6)) not in {k for k, _ in finals}  # merged into [0, 15) before it closed


@pytest.mark.parametrize("full", ["spill_to_disk_when_full", "shut_down_when_full"])
def test_bounded_buffers_give_the_same_finals(spark: SparkSession, run: Run, tmp_path: Path, full: str) -> None:
    """A bounded until_window_closes buffer (never fused): spilled rows are dropped by a retraction
    as in-memory ones are; a bound never reached shuts nothing down. The same finals as unbounded."""
    with session_conf(spark, {"spark.sql.shuffle.partitions": "1"}):  # one buffer: a bound of 1 row spills
        bound = BufferConfig.max_records(1 if full == "spill_to_disk_when_full" else 1000)
        run.start(suppress(sessions(run.events()), Suppressed.until_window_closes(getattr(bound, full)())))
        feed_all(run, BATCHES)
    rows = run.rows()
    assert Counter(key(r) for r in rows) == Counter(append_mode_finals(spark, run.src, tmp_path).keys())
    assert {key(r): (r["n"], r["total"]) for r in rows} == append_mode_finals(spark, run.src, tmp_path / "again")
    ops = [op for p in run.query.recentProgress for op in p["stateOperators"] if op["operatorName"] == "suppress"]
    if full == "spill_to_disk_when_full":
        assert max(op["customMetrics"]["suppressionDiskBufferBytes"] for op in ops) > 0  # it did spill


def test_wall_clock_limit_forwards_retractions(spark: SparkSession, run: Run, tmp_path: Path) -> None:
    """until_wall_clock_time_limit: a limit of 0 forwards every change at its batch, retractions
    included: the rows of plain update mode."""
    run.start(suppress(sessions(run.events()), Suppressed.until_wall_clock_time_limit(
        timedelta(seconds=0), BufferConfig.unbounded())))
    feed_all(run, BATCHES)
    plain = Run(spark, tmp_path / "plain")
    plain.start(sessions(plain.events()))
    try:
        feed_all(plain, BATCHES)
        assert any(is_retraction(r) for r in plain.rows())
        assert Counter(map(str, run.rows())) == Counter(map(str, plain.rows()))
    finally:
        plain.stop()


@pytest.mark.parametrize("first", ["true", "false"])
def test_changing_fusion_on_a_checkpoint_is_refused(spark: SparkSession, run: Run, first: str) -> None:
    """Fused and unfused final results keep the open sessions in different places; a checkpoint of
    one refuses to start as the other, naming the setting that brings its plan back."""
    df = suppress(sessions(run.events()), Suppressed.until_window_closes(BufferConfig.unbounded()))
    try:
        with session_conf(spark, {"spark.sluice.suppress.fused": first}):
            run.start(df)
            run.feed(*BATCHES[0])
            run.stop()
        with session_conf(spark, {"spark.sluice.suppress.fused": "false" if first == "true" else "true"}):
            with pytest.raises(StreamingQueryException,
                               match=f"spark.sluice.suppress.fused={first} for this checkpoint"):
                run.start(df)
                run.feed(*BATCHES[1])
    finally:
        run.query = None
    assert [r for b in sorted(run.batches) for r in run.batches[b]] == []  # nothing closed yet


@pytest.mark.parametrize("limit", [0, 7])
def test_time_limit_forwards_retractions_and_ends_at_the_final_sessions(
        spark: SparkSession, run: Run, tmp_path: Path, limit: int) -> None:
    """until_time_limit rate-limits a session's updates and forwards its retraction as Kafka Streams
    forwards a tombstone. Limit 0 forwards every change at once (the rows of plain update mode); any
    limit leaves a table keyed by (key, session) exactly at the final sessions once stream time has
    passed them all."""
    df = suppress(sessions(run.events()), Suppressed.until_time_limit(timedelta(seconds=limit),
                                                                    BufferConfig.unbounded()),
                  time_col="session_window.end")
    run.start(df)
    # Stream time is per partition (as per task in Kafka Streams): the last batch reaches every key's.
    flush = [(200, user) for user in "abc"]
    feed_all(run, BATCHES + [flush])
    rows = run.rows()
    assert any(is_retraction(r) for r in rows)
    table: dict = {}
    for r in rows:
        if is_retraction(r):
            table.pop(key(r), None)  # a session whose rows the limit held back may be retracted unseen
        else:
            table[key(r)] = (r["n"], r["total"])
    finals = append_mode_finals(spark, run.src, tmp_path)
    assert {k: v for k, v in table.items() if k in finals or k[2] <= max(k2[2] for k2 in finals)} == finals
    if limit == 0:
        plain = Run(spark, tmp_path / "plain")
        plain.start(sessions(plain.events()))
        try:
            feed_all(plain, BATCHES + [flush])
            assert Counter(map(str, rows)) == Counter(map(str, plain.rows()))
        finally:
            plain.stop()


# --- the caches ----------------------------------------------------------------------------------

@pytest.mark.parametrize("delegate", ["hdfs", "rocksdb"])
def test_on_the_record_cache_with_the_emission_cache(spark: SparkSession, run: Run, tmp_path: Path,
                                                     delegate: str) -> None:
    """The record cache as the provider and the emission cache below the sink (a commit interval):
    the rows still build the append-mode result; the session state goes through the cache."""
    with session_conf(spark, {"spark.sql.streaming.stateStore.providerClass": "sluice.cache.CachingStateStoreProvider",
                              "spark.sluice.statestore.cache.delegate": delegate,
                              "spark.sluice.commit.interval.ms": "1ms"}):
        run.start(sessions(run.events()))
    feed_all(run, BATCHES)
    assert table_of(run) == append_mode_finals(spark, run.src, tmp_path)
    ops = [op for p in run.query.recentProgress for op in p["stateOperators"]]
    assert {"sluiceSessionUpdate", "emitCache"} <= {op["operatorName"] for op in ops}
    session_ops = [op for op in ops if op["operatorName"] == "sluiceSessionUpdate"]
    # Session state is read by prefix scans (a key's sessions), which the record cache serves by
    # flushing its rows to the delegate first: it holds what is written, its scans go through.
    assert max(op["customMetrics"]["cacheSizeBytes"] for op in session_ops) > 0
    assert sum(op["customMetrics"]["cacheFlushes"] for op in session_ops) > 0


def in_order_within_the_watermark(seed: int, files: int) -> list[list[tuple]]:
    """`files` files of events, each at most 9 s before the largest event time so far (the watermark
    delay is 10 s), then one far ahead that closes every session. No event is ever late, whatever
    watermark the batch before had, so the sessions (and which of them the last watermark closes)
    do not depend on where batch boundaries fall: a query taking several files per batch must end
    where one taking a file per batch does."""
    rng = random.Random(seed)
    out, newest = [], 0
    for _ in range(files):
        batch = []
        for _ in range(3):
            t = max(0, newest + rng.randint(-9, 4))
            newest = max(newest, t)
            batch.append((t, rng.choice("xyz"), rng.randint(1, 9)))
        out.append(batch)
    return out + [[(newest + 100, "x", 1)]]


@pytest.mark.parametrize("finals", [False, True], ids=["updates", "until_window_closes"])
def test_input_bound_takes_the_input_in_several_batches_and_ends_at_the_same_sessions(
        spark: SparkSession, run: Run, tmp_path: Path, finals: bool) -> None:
    """spark.sluice.input.buffer.max.bytes on the file source below a session aggregation: the
    backlog (every file written before the start) is taken in batches of a few files each, within
    the bound, and the result is the unbounded one (Spark's append mode fed a file per batch)."""
    for batch in in_order_within_the_watermark(seed=11, files=24):
        run.write(*batch)
    for i, f in enumerate(sorted(run.src.glob("*.json"))):
        # the file source takes a backlog in modification-time order (milliseconds): files written
        # within one millisecond could be taken out of order, and an event then be late
        os.utime(f, (1_700_000_000 + i, 1_700_000_000 + i))
    sizes = [f.stat().st_size for f in sorted(run.src.glob("*.json"))]
    bound = 3 * max(sizes)  # about three files a batch
    # the bound is read when the query's sources are resolved: set while the DataFrame is built
    with session_conf(spark, {"spark.sluice.input.buffer.max.bytes": str(bound)}):
        # no maxFilesPerTrigger: the byte bound alone splits the backlog
        events = spark.readStream.schema("ts timestamp, user string, v long").json(str(run.src))
        counts = sessions(events)
        run.start(suppress(counts, Suppressed.until_window_closes(BufferConfig.unbounded())) if finals else counts)
    run.query.processAllAvailable()
    admitted = [int(p["sources"][0]["metrics"][BYTES_METRIC]) for p in run.query.recentProgress
                if p["numInputRows"] > 0]
    assert len(admitted) >= sum(sizes) // bound and sum(admitted) == sum(sizes), admitted
    assert all(b <= bound for b in admitted), (bound, admitted)
    reference = append_mode_finals(spark, run.src, tmp_path / "reference")
    rows = run.rows()
    if finals:
        assert Counter(key(r) for r in rows) == Counter(reference.keys())  # each session once
        assert {key(r): (r["n"], r["total"]) for r in rows} == reference
    else:
        assert any(is_retraction(r) for r in rows), "no event bridged two sessions: choose another seed"
        assert table_of(run) == reference


def test_sql_session_windows_in_update_mode_and_sluice_suppress(spark: SparkSession, run: Run,
                                                                tmp_path: Path) -> None:
    """The SQL forms reach the same operators: a session-window GROUP BY written in update mode, and
    the table function sluice_suppress over it."""
    run.events().withWatermark("ts", "10 seconds").createOrReplaceTempView("session_events")
    spark.sql("""CREATE OR REPLACE TEMP VIEW session_counts AS
                 SELECT session_window(ts, '5 seconds') AS session_window, user, count(*) AS n, sum(v) AS total
                 FROM session_events GROUP BY session_window(ts, '5 seconds'), user""")
    run.start(spark.table("session_counts"))
    feed_all(run, BATCHES)
    assert table_of(run) == append_mode_finals(spark, run.src, tmp_path)
    finals = Run(spark, tmp_path / "finals")
    finals.events().withWatermark("ts", "10 seconds").createOrReplaceTempView("session_events")
    finals.start(spark.sql("SELECT * FROM sluice_suppress(TABLE(session_counts), 'until_window_closes')"))
    try:
        feed_all(finals, BATCHES)
        got = {key(r): (r["n"], r["total"]) for r in finals.rows()}
        assert len(got) == len(finals.rows()) and got == append_mode_finals(spark, finals.src, tmp_path / "f")
    finally:
        finals.stop()


# --- a killed driver ------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["updates", "finals"])
def test_killed_driver_restarted_loses_nothing_and_emits_no_final_twice(spark: SparkSession, tmp_path: Path,
                                                                       provider: str, mode: str) -> None:
    """The whole driver process SIGKILLed mid-stream, the query restarted on its checkpoint in
    another: the changes still build the append-mode result; under until_window_closes every session
    is emitted exactly once. Events are out of order by less than the watermark delay, so what each
    batch emits does not depend on where the batches without input fall."""
    from support.session_kill_child import file_sink, session_query
    src, ckpt, out = tmp_path / "in", tmp_path / "ckpt", tmp_path / "out"
    for d in (src, out):
        d.mkdir()
    rng = random.Random(3)
    writer = Run(spark, tmp_path / "w")
    writer.src = src
    for h in range(14):
        writer.write(*[(max(0, h * 6 + rng.randint(-4, 4)), rng.choice("abc"), rng.randint(1, 9)) for _ in range(3)])
    writer.write(*[(500, user) for user in "abc"])  # closes every earlier session
    for i, f in enumerate(sorted(src.glob("*.json"))):  # the file source takes files in this order
        os.utime(f, (1_700_000_000 + i, 1_700_000_000 + i))
    kill_after_batches("session_kill_child.py", [str(src), str(ckpt), str(out), PROVIDERS[provider], mode], out,
                       batches=5)
    assert len(list(out.glob("*.json"))) < 15  # killed mid-stream
    drain_to_files(spark, session_query(spark, str(src), mode), file_sink(str(out)), ckpt,
                   {"spark.sql.streaming.stateStore.providerClass": PROVIDERS[provider]})
    rows = [r for f in sorted(out.glob("*.json")) for r in json.loads(f.read_text())]
    as_key = lambda r: (r["user"], datetime.fromisoformat(r["start"]), datetime.fromisoformat(r["end"]))  # noqa: E731
    finals = append_mode_finals(spark, src, tmp_path / "reference")
    if mode == "updates":
        table: dict = {}
        for r in rows:
            if r["n"] is None:
                del table[as_key(r)]
            else:
                table[as_key(r)] = (r["n"], r["total"])
        closed = max(k[2] for k in finals)
        assert {k: v for k, v in table.items() if k[2] <= closed} == finals
    else:
        assert Counter(as_key(r) for r in rows) == Counter(finals.keys())  # each session exactly once
        assert {as_key(r): (r["n"], r["total"]) for r in rows} == finals
