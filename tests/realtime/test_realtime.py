"""spark-4.3: Spark's real-time trigger (stateful queries, Kafka only) with sluice configured: a real-time
query without sluice's stateful features runs as it does without sluice (the extensions and the
input bound stay out of its way), suppress's until_window_closes and
until_time_limit run per row on each partition's stream time; each other sluice feature that works at
batch boundaries is refused when the query plans a batch, naming itself, why and what to use instead."""
from __future__ import annotations

import importlib.util
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import sluice
from support import kafka as kh
from support import realtime_kill_child
from support.children import kill_when
from support.kafka import KAFKA_FETCH_MAX_WAIT_MS
from support.metrics import executor_consumer_metrics
from support.realtime_kill_child import (
    BASE,
    BATCH,
    all_counts,
    epoch_texts,
    expected_finals,
    file_rows,
    first_batch_committed,
    later_batch_opened,
    produce_events,
    timed_counts,
    windowed_counts,
    windowed_finals,
)
from support.session import session_conf, stop_session

pytestmark = [pytest.mark.spark("4.3", reason="stateful real-time mode arrived in Spark 4.3"), pytest.mark.kafka]

PROVIDER = "spark.sql.streaming.stateStore.providerClass"
INCREMENTAL_CLEANUP = "spark.sql.streaming.statefulOperator.incrementalCleanupFactor"
ROOT = Path(__file__).resolve().parents[2]
RECORDS = 300


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SparkSession, kh.Broker]]:
    broker = kh.Broker(tmp_path_factory.mktemp("kafka")).start()
    stop_session()
    # one input partition and one shuffle partition: real-time mode runs every task at once (2 slots)
    spark = realtime_kill_child.session()
    kh.create_topic(spark, broker.bootstrap, "in", 1)
    kh.produce(spark, broker.bootstrap, "in", RECORDS, 1, min_bytes=10, max_bytes=20)
    yield spark, broker
    stop_session()
    broker.stop()


def _counts(spark: SparkSession, broker: kh.Broker, **options: str) -> DataFrame:
    src = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
           .option("subscribe", "in").option("startingOffsets", "earliest").options(**options).load())
    return src.withWatermark("timestamp", "1 second").groupBy(F.window("timestamp", "1 minute"), "key").count()


def _start(spark: SparkSession, broker: kh.Broker, df: DataFrame, name: str, tmp_path: Path):
    kh.create_topic(spark, broker.bootstrap, name, 1)
    return (df.selectExpr("to_json(struct(key, count)) as value").writeStream.format("kafka")
            .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", name).outputMode("update")
            .option("checkpointLocation", str(tmp_path / name)).trigger(realTime=BATCH).start())


def _failure(query, timeout: float = 120.0) -> str:
    deadline = time.monotonic() + timeout
    while query.isActive and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not query.isActive, "the query was not refused"
    return str(query.exception())


def test_a_real_time_aggregation_without_sluice_features_runs_with_sluice_configured(rt, tmp_path: Path) -> None:
    spark, broker = rt
    q = _start(spark, broker, _counts(spark, broker), "plain", tmp_path)
    try:
        deadline = time.monotonic() + 120
        out: list = []
        while time.monotonic() < deadline:
            assert q.isActive, q.exception()
            out = [json.loads(r.value) for r in spark.read.format("kafka")
                   .option("kafka.bootstrap.servers", broker.bootstrap).option("subscribe", "plain")
                   .option("startingOffsets", "earliest").load().selectExpr("cast(value as string) value").collect()]
            if sum(1 for _ in out) >= RECORDS:  # real-time mode emits one updated row per input row
                break
            time.sleep(0.5)
        assert len(out) >= RECORDS
        latest: dict[str, int] = {}
        for r in out:
            latest[r["key"]] = max(latest.get(r["key"], 0), r["count"])
        assert sum(latest.values()) == RECORDS  # every record counted once
    finally:
        q.stop()


def test_a_real_time_source_keeps_kafkas_wait_for_an_empty_fetch(rt, tmp_path: Path) -> None:
    """sluice shortens the broker's wait for an empty fetch for micro-batch sources only (test_input_kafka): the
    real-time reader polls on at the end of the log with no offset lookups queued behind its fetches, where a
    shorter wait would only mean more empty fetches. Its consumer keeps Kafka's 500 ms: once the query has read
    everything, it sends at most one fetch per 500 ms of polling (its own fetch-total), plus one per batch start."""
    spark, broker = rt
    group = "rt-wait"
    q = _start(spark, broker, _counts(spark, broker, groupIdPrefix=group), "rtwait", tmp_path)

    def fetches() -> float:
        return sum(executor_consumer_metrics(spark, group, "fetch-total"))

    def emitted() -> int:
        return (spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
                .option("subscribe", "rtwait").option("startingOffsets", "earliest").load().count())
    try:
        deadline = time.monotonic() + 120
        while emitted() < RECORDS:  # real-time mode emits one updated row per input row
            assert q.isActive and time.monotonic() < deadline, q.exception()
            time.sleep(0.5)
        idle_s, batch_s = 4.0, float(BATCH.split()[0])
        before = fetches()
        time.sleep(idle_s)
        sent = fetches() - before
        assert q.isActive, q.exception()
        assert sent <= idle_s * 1000 / KAFKA_FETCH_MAX_WAIT_MS + (idle_s / batch_s + 1), sent
    finally:
        q.stop()


def _windowed(spark: SparkSession, broker: kh.Broker, topic: str) -> DataFrame:
    return windowed_finals(spark, broker.bootstrap, topic)


def _finals_query(spark: SparkSession, broker: kh.Broker, df: DataFrame, out: str, checkpoint: Path, trigger: dict):
    return (df.selectExpr("to_json(struct(key, cast(window.end as long) as end, count)) as value")
            .writeStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap).option("topic", out)
            .outputMode("update").option("checkpointLocation", str(checkpoint)).trigger(**trigger).start())


def _read(spark: SparkSession, broker: kh.Broker, topic: str) -> list[tuple[str, int, int]]:
    rows = (spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap).option("subscribe", topic)
            .option("startingOffsets", "earliest").load().selectExpr("cast(value as string) value").collect())
    return [(d["key"], d["end"], d["count"]) for d in (json.loads(r.value) for r in rows)]


def _latest(rows: list[tuple[str, int, int]]) -> dict[tuple[str, int], int]:
    """The largest count emitted per (key, window end): counts only grow."""
    out: dict[tuple[str, int], int] = {}
    for k, end, n in rows:
        out[(k, end)] = max(out.get((k, end), 0), n)
    return out


def _await(spark, broker, q, topic: str, n: int = 0, timeout: float = 180.0,
           until: Callable[[list], bool] | None = None) -> list[tuple[str, int, int]]:
    """The rows of `topic` once there are `n` of them (or `until` holds of them)."""
    done = until or (lambda rows: len(rows) >= n)
    deadline = time.monotonic() + timeout
    out: list = []
    while time.monotonic() < deadline:
        assert q.isActive, q.exception()
        out = _read(spark, broker, topic)
        if done(out):
            return out
        time.sleep(0.5)
    raise AssertionError(f"{len(out)} rows, not the ones expected, after {timeout} s: {sorted(out)}")


def _stop_at_a_batch_boundary(q, timeout: float = 120.0) -> None:
    """Stops `q` once a batch that started after the output was seen has committed: the batch the
    stop then interrupts had nothing to emit (a clean stop; an interrupted batch with output would
    emit it again when rerun, as Spark's at-least-once real-time sink does)."""
    seen = q.lastProgress["batchId"] if q.lastProgress else -1
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (q.lastProgress is None or q.lastProgress["batchId"] < seen + 2):
        assert q.isActive, q.exception()
        time.sleep(0.2)
    q.stop()


def _micro_batch_finals(spark, broker, topic: str, tmp_path: Path, name: str, n: int) -> list:
    kh.create_topic(spark, broker.bootstrap, name, 1)
    q = _finals_query(spark, broker, _windowed(spark, broker, topic), name, tmp_path / name,
                      {"processingTime": "1 second"})
    try:
        return _await(spark, broker, q, name, n)
    finally:
        q.stop()


def test_suppress_until_window_closes_emits_the_micro_batch_finals_each_once_and_across_a_restart(
        rt, tmp_path: Path) -> None:
    spark, broker = rt
    kh.create_topic(spark, broker.bootstrap, "ev", 1)
    kh.create_topic(spark, broker.bootstrap, "rtfinals", 1)
    produce_events(spark, broker.bootstrap, "ev", 0, 120)
    first = expected_finals(119)
    q = _finals_query(spark, broker, _windowed(spark, broker, "ev"), "rtfinals", tmp_path / "rt",
                      {"realTime": BATCH})
    try:
        out = _await(spark, broker, q, "rtfinals", len(first))
        _stop_at_a_batch_boundary(q)
    finally:
        q.stop()
    assert len(out) == len(set(out)), "a final result emitted twice"
    assert set(out) == first
    assert set(out) == set(_micro_batch_finals(spark, broker, "ev", tmp_path, "mbfinals1", len(first)))

    # restart on the checkpoint with more input: no final twice, none lost
    produce_events(spark, broker.bootstrap, "ev", 120, 60)
    both = expected_finals(179)
    q = _finals_query(spark, broker, _windowed(spark, broker, "ev"), "rtfinals", tmp_path / "rt",
                      {"realTime": BATCH})
    try:
        _await(spark, broker, q, "rtfinals", len(both))
        _stop_at_a_batch_boundary(q)  # batches more: anything emitted twice would show
        out = _read(spark, broker, "rtfinals")
    finally:
        q.stop()
    assert len(out) == len(set(out)), "a final result emitted twice across the restart"
    assert set(out) == both
    assert set(out) == set(_micro_batch_finals(spark, broker, "ev", tmp_path, "mbfinals2", len(both)))


def test_a_window_closes_in_every_shuffle_partition_without_waiting_for_a_row_of_its_keys(
        rt, tmp_path: Path) -> None:
    """Two shuffle partitions and a real-time batch of 10 minutes: 16 keys have a record in one window, then
    one record of another key moves event time past that window's end plus the grace. That record reaches
    one shuffle partition; the other gets no row after the window's end. The upstream task's progress rows
    tell it, so every key's final result leaves within the batch (without them that partition would hold its
    finals until the batch ends). Progress rows are neither output nor state: the output is exactly the 16
    finals, and the aggregation's state rows are the records' (window, key)s."""
    spark, broker = rt
    kh.create_topic(spark, broker.bootstrap, "evsplit", 1)
    records = [(f"p{i}", BASE + 1) for i in range(16)] + [("z", BASE + 30)]
    (spark.createDataFrame(records, "key string, ts long")
     .selectExpr("cast(key as binary) key", "cast(to_json(named_struct('ts', ts)) as binary) value").coalesce(1)
     .write.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap).option("topic", "evsplit").save())
    want = {(f"p{i}", BASE + 10, 1) for i in range(16)}
    kh.create_topic(spark, broker.bootstrap, "splitfinals", 1)
    checkpoint = tmp_path / "split"
    spark.conf.set("spark.sql.shuffle.partitions", "2")  # taken by the checkpoint when the query starts
    try:
        q = _finals_query(spark, broker, _windowed(spark, broker, "evsplit"), "splitfinals", checkpoint,
                          {"realTime": "10 minutes"})
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "1")
    try:
        out = _await(spark, broker, q, "splitfinals", len(want), timeout=120)
        assert q.lastProgress is None, "the finals waited for a batch to end"
    finally:
        q.stop()
    assert sorted(out) == sorted(want)
    # the same input again in batches that end: once the window's state is evicted, the aggregation holds
    # the one open (window, key), and no state row of a progress row. Evicted while rows come, too (Spark's
    # incremental cleanup), by suppress's clock as at the batch's end.
    kh.create_topic(spark, broker.bootstrap, "splitfinals2", 1)
    spark.conf.set(INCREMENTAL_CLEANUP, "10")
    q = _finals_query(spark, broker, _windowed(spark, broker, "evsplit"), "splitfinals2", tmp_path / "split2",
                      {"realTime": BATCH})
    try:
        _await(spark, broker, q, "splitfinals2", len(want))
        deadline, held = time.monotonic() + 120, None
        while held != 1 and time.monotonic() < deadline:
            assert q.isActive, q.exception()
            time.sleep(0.5)
            ops = q.lastProgress["stateOperators"] if q.lastProgress else []
            held = next((op["numRowsTotal"] for op in ops if op["operatorName"] != "suppress"), None)
        assert held == 1, q.lastProgress
    finally:
        q.stop()
        spark.conf.unset(INCREMENTAL_CLEANUP)


def test_a_backlog_drained_by_two_upstream_tasks_gives_the_micro_batch_finals(rt, tmp_path: Path) -> None:
    """Two input partitions, one task each, feeding one suppress partition: draining a backlog one
    task runs ahead of the other, and a window closes only once both have passed it."""
    spark, broker = rt
    kh.create_topic(spark, broker.bootstrap, "ev2", 2)
    produce_events(spark, broker.bootstrap, "ev2", 0, 300, partition=0, prefix="a")
    produce_events(spark, broker.bootstrap, "ev2", 0, 300, partition=1, prefix="b")
    want = expected_finals(299, "a") | expected_finals(299, "b")
    out = _run_to(spark, broker, _windowed(spark, broker, "ev2"), "finals2", tmp_path,
                  until=lambda rows: set(rows) >= want)
    assert len(out) == len(set(out)) and set(out) == want
    assert set(out) == set(_micro_batch_finals(spark, broker, "ev2", tmp_path, "mbfinals2in", len(want)))


class _PacedProducer(threading.Thread):
    """Sends records `first`..`last` of `produce_events`' shape (key <prefix><i % 3>, event time BASE + i s) into
    one partition from the driver's Kafka client, `per_tick` records every 0.1 s: a partition whose backlog
    drains slowly, never silent for a whole real-time batch."""

    def __init__(self, spark: SparkSession, bootstrap: str, topic: str, partition: int, first: int, last: int,
                 prefix: str, per_tick: int) -> None:
        super().__init__(daemon=True)
        self.jvm, self.bootstrap, self.topic, self.partition = spark._jvm, bootstrap, topic, partition
        self.first, self.last, self.prefix, self.per_tick = first, last, prefix, per_tick
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            props = self.jvm.java.util.Properties()
            serializer = "org.apache.kafka.common.serialization.StringSerializer"
            for k, v in {"bootstrap.servers": self.bootstrap, "key.serializer": serializer,
                         "value.serializer": serializer, "linger.ms": "0"}.items():
                props.put(k, v)
            producer = self.jvm.org.apache.kafka.clients.producer.KafkaProducer(props)
            try:
                for start in range(self.first, self.last + 1, self.per_tick):
                    for i in range(start, min(start + self.per_tick, self.last + 1)):
                        producer.send(self.jvm.org.apache.kafka.clients.producer.ProducerRecord(
                            self.topic, self.partition, f"{self.prefix}{i % 3}", json.dumps({"ts": BASE + i})))
                    producer.flush()
                    time.sleep(0.1)
            finally:
                producer.close()
        except BaseException as e:  # noqa: BLE001 - reported by the test that joins
            self.error = e


def test_a_real_time_drain_with_one_partition_far_behind_drops_nothing(rt, tmp_path: Path) -> None:
    """Two input partitions drained at different speeds: partition 1's backlog is read at once, partition 0's
    arrives over several real-time batches, its event times far behind. Spark's watermark (the fastest task's
    largest event time minus the delay) would make Spark's aggregation drop partition 0's rows as late from the
    second batch on and evict the windows it still updates; the aggregation under suppress judges lateness and
    evicts by suppress's own clock, the least over its upstream tasks. So the drain drops nothing, and its finals
    are the micro-batch run's over the same records."""
    spark, broker = rt
    last = 1499
    kh.create_topic(spark, broker.bootstrap, "evdrain", 2)
    produce_events(spark, broker.bootstrap, "evdrain", 0, last + 1, partition=1, prefix="b")
    produce_events(spark, broker.bootstrap, "evdrain", 0, 100, partition=0, prefix="a")
    slow = _PacedProducer(spark, broker.bootstrap, "evdrain", 0, 100, last, "a", per_tick=25)
    want = expected_finals(last, "a") | expected_finals(last, "b")
    progress: list = []
    slow.start()
    try:
        out = _run_to(spark, broker, _windowed(spark, broker, "evdrain"), "drained", tmp_path,
                      until=lambda rows: set(rows) >= want, progress=progress)
    finally:
        slow.join()
    assert slow.error is None, slow.error
    reports = [json.loads(p.json) for p in progress]
    batches = {r["batchId"] for r in reports}
    assert len(batches) >= 3, f"the drain spanned batches {sorted(batches)}: no batch switch while it ran"
    assert len(out) == len(set(out)) and set(out) == want
    dropped = [(r["batchId"], op["operatorName"], op.get("numRowsDroppedByWatermark", 0),
                op.get("customMetrics", {}).get("lateRecordDropTotal", 0))
               for r in reports for op in r["stateOperators"]]
    assert all(d == 0 and n == 0 for _, _, d, n in dropped), dropped
    # and the aggregation's state is still bounded: it evicts the windows every suppress partition has closed
    evicted = [op.get("numRowsRemoved", 0) for r in reports for op in r["stateOperators"]
               if op["operatorName"] != "suppress"]
    assert sum(evicted) > 0, reports
    assert set(out) == set(_micro_batch_finals(spark, broker, "evdrain", tmp_path, "mbdrained", len(want)))


def test_suppress_until_time_limit_runs_per_row_on_stream_time(rt, tmp_path: Path) -> None:
    spark, broker = rt
    kh.create_topic(spark, broker.bootstrap, "evlimit", 1)
    kh.create_topic(spark, broker.bootstrap, "limited", 1)
    produce_events(spark, broker.bootstrap, "evlimit", 0, 60)
    counts = timed_counts(spark, broker.bootstrap, "evlimit")
    limited = sluice.suppress(counts, sluice.Suppressed.until_time_limit(5, sluice.BufferConfig.unbounded()),
                              time_col="ts")
    q = _finals_query(spark, broker, limited, "limited", tmp_path / "limited", {"realTime": BATCH})
    try:
        # each (key, window) is buffered at its first record's time and released once stream time is
        # 5 s past it: with one record per second that is within its window or soon after
        expected = {(k, end) for (k, end, _) in expected_finals(59) if end <= BASE + 59 - 5}
        out = _await(spark, broker, q, "limited", len(expected))
    finally:
        q.stop()
    assert expected <= {(k, end) for (k, end, _) in out}


def _refusal(spark, broker, df: DataFrame, name: str, tmp_path: Path) -> str:
    return _failure(_start(spark, broker, df, name, tmp_path))


def _run_to(spark, broker, df: DataFrame, name: str, tmp_path: Path, until: Callable[[list], bool],
            conf: dict[str, str] | None = None, commit: bool = False,
            progress: list | None = None) -> list[tuple[str, int, int]]:
    """Runs `df` under the real-time trigger into topic `name` (with the session `conf` while it
    runs) until its rows satisfy `until` (and, with `commit`, batches after them have committed
    their state); returns them, and adds the query's progress reports to `progress`."""
    with session_conf(spark, conf or {}):
        if not (tmp_path / name).exists():  # a restart writes on to its topic
            kh.create_topic(spark, broker.bootstrap, name, 1)
        q = _finals_query(spark, broker, df, name, tmp_path / name, {"realTime": BATCH})
        try:
            out = _await(spark, broker, q, name, until=until)
            if commit:
                _stop_at_a_batch_boundary(q)
            return out
        finally:
            q.stop()
            if progress is not None:
                progress.extend(q.recentProgress)


def _events_topic(spark, broker, name: str, count: int) -> str:
    kh.create_topic(spark, broker.bootstrap, name, 1)
    produce_events(spark, broker.bootstrap, name, 0, count)
    return name


def _evicted(last: int, bound: int) -> list[tuple[str, int, int]]:
    """What a buffer of `bound` rows that emits early sends, in order, for records 0..last when no
    row is due by time: after each record, while it holds more than `bound` rows, the row buffered
    first (its first record's event time) leaves with its latest count (Kafka Streams' eviction order)."""
    buffered: dict[tuple[str, int], tuple[int, int]] = {}  # (key, end) -> (buffer time, count)
    counts = all_counts(-1)
    out = []
    for i in range(last + 1):
        e = (f"k{i % 3}", BASE + (i // 10 + 1) * 10)
        counts[e] = counts.get(e, 0) + 1
        buffered[e] = (buffered.get(e, (BASE + i, 0))[0], counts[e])
        while len(buffered) > bound:
            first = min(buffered, key=lambda x: buffered[x][0])
            out.append((first[0], first[1], buffered.pop(first)[1]))
    return out


def test_a_bounded_buffer_applies_its_bound_per_row(rt, tmp_path: Path) -> None:
    spark, broker = rt
    topic = _events_topic(spark, broker, "evbound", 60)
    counts = timed_counts(spark, broker.bootstrap, topic)
    # a limit no row reaches within the input's 59 s: rows leave only when the 2-row bound pushes them out
    bounded = sluice.suppress(counts, sluice.Suppressed.until_time_limit(
        100, sluice.BufferConfig.max_records(2).emit_early_when_full()), time_col="ts")
    expected = _evicted(59, 2)
    out = _run_to(spark, broker, bounded, "bounded", tmp_path, until=lambda rows: len(rows) >= len(expected))
    assert out == expected


def test_a_full_buffer_that_shuts_down_fails_the_query_naming_its_bound(rt, tmp_path: Path) -> None:
    spark, broker = rt
    topic = _events_topic(spark, broker, "evstrict", 30)
    strict = sluice.suppress(windowed_counts(spark, broker.bootstrap, topic), sluice.Suppressed.until_window_closes(
        sluice.BufferConfig.max_records(1).shut_down_when_full()))
    message = _refusal(spark, broker, strict, "strict", tmp_path)
    assert "suppress buffer of operator" in message and "is full in partition 0" in message
    assert "[records/max] = [2/1]" in message


def test_a_spilling_buffer_is_refused_naming_why_and_what_to_use(rt, tmp_path: Path) -> None:
    spark, broker = rt
    spilling = sluice.suppress(_counts(spark, broker), sluice.Suppressed.until_window_closes(
        sluice.BufferConfig.max_records(10).spill_to_disk_when_full()))
    message = _refusal(spark, broker, spilling, "spilling", tmp_path)
    assert "suppress with a spilling buffer" in message and "does not run under Spark's real-time trigger" in message
    assert "Use emit_early_when_full() or shut_down_when_full()" in message and "trigger(processingTime=" in message


def test_wall_clock_suppression_releases_each_key_once_its_limit_has_passed(rt, tmp_path: Path) -> None:
    spark, broker = rt
    topic = _events_topic(spark, broker, "evwall", 60)
    counts = all_counts(59)
    wall = sluice.suppress(windowed_counts(spark, broker.bootstrap, topic),
                           sluice.Suppressed.until_wall_clock_time_limit(1, sluice.BufferConfig.unbounded()))
    out = _run_to(spark, broker, wall, "wall", tmp_path, until=lambda rows: _latest(rows) == counts)
    assert _latest(out) == counts
    # the backlog arrives within the limit: its updates are absorbed, each key's latest row leaves
    assert len(out) < 60


def test_the_emission_cache_forwards_each_keys_latest_row_on_its_interval_and_across_a_restart(
        rt, tmp_path: Path) -> None:
    spark, broker = rt
    topic = _events_topic(spark, broker, "evcache", 60)
    conf = {"spark.sluice.commit.interval.ms": "1000"}
    counts = all_counts(59)
    out = _run_to(spark, broker, windowed_counts(spark, broker.bootstrap, topic), "cached", tmp_path,
                  until=lambda rows: _latest(rows) == counts, conf=conf, commit=True)
    assert _latest(out) == counts
    assert len(out) < 60, "every update was forwarded: the cache absorbed none"
    per_key: dict[tuple[str, int], list[int]] = {}
    for k, end, n in out:
        per_key.setdefault((k, end), []).append(n)
    assert all(ns == sorted(set(ns)) for ns in per_key.values()), "a key's row forwarded twice or out of order"
    # restarted on its checkpoint (state committed with checkpoint ids, as real-time mode keeps them)
    produce_events(spark, broker.bootstrap, topic, 60, 30)
    more = all_counts(89)
    out = _run_to(spark, broker, windowed_counts(spark, broker.bootstrap, topic), "cached", tmp_path,
                  until=lambda rows: _latest(rows) == more, conf=conf)
    assert _latest(out) == more


def test_sql_suppress_runs_under_the_real_time_trigger(rt, tmp_path: Path) -> None:
    spark, broker = rt
    topic = _events_topic(spark, broker, "evsql", 60)
    windowed_counts(spark, broker.bootstrap, topic).createOrReplaceTempView("rt_counts")
    final = spark.sql("SELECT * FROM sluice_suppress(TABLE(rt_counts), 'until_window_closes')")
    out = _run_to(spark, broker, final, "sqlfinals", tmp_path, until=lambda rows: set(rows) >= expected_finals(59))
    assert len(out) == len(set(out)) and set(out) == expected_finals(59)


def test_the_readme_example_runs_on_kafka(rt, tmp_path: Path) -> None:
    spark, broker = rt
    spec = importlib.util.spec_from_file_location("realtime_example", ROOT / "examples" / "realtime.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    topic = _events_topic(spark, broker, "clicks", 60)
    for t in ("click-finals", "click-updates"):
        kh.create_topic(spark, broker.bootstrap, t, 1)
    queries = example.start(spark, broker.bootstrap, topic, str(tmp_path))

    def rows(t: str) -> list[tuple[str, int, int]]:
        return [(d["user"], d["end"], d["count"]) for d in (json.loads(r.value) for r in (
            spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap).option("subscribe", t)
            .option("startingOffsets", "earliest").load().selectExpr("cast(value as string) value").collect()))]
    try:
        deadline = time.monotonic() + 180
        while not (set(rows("click-finals")) == expected_finals(59) and _latest(rows("click-updates")) == all_counts(59)):
            assert all(q.isActive for q in queries), [q.exception() for q in queries]
            assert time.monotonic() < deadline, (rows("click-finals"), rows("click-updates"))
            time.sleep(0.5)
    finally:
        for q in queries:
            q.stop()
    finals = rows("click-finals")
    assert len(finals) == len(set(finals)) and set(finals) == expected_finals(59)
    assert len(rows("click-updates")) < 60  # the emission cache absorbed updates


def test_a_killed_real_time_query_restarted_on_its_checkpoint_loses_no_final_and_repeats_none(
        rt, tmp_path: Path) -> None:
    """Late records kept too: a record for a closed window comes before each part of the input, and each
    is kept once, across the kill. (Finals alone under random kills: test_crash_soak's real-time soak.)"""
    spark, broker = rt
    topic = "evkill"
    kh.create_topic(spark, broker.bootstrap, topic, 1)
    out, late = tmp_path / "out", tmp_path / "late"
    out.mkdir()
    args = [broker.bootstrap, topic, str(tmp_path / "ckpt"), str(out), f"--late={late}"]
    produced = []

    def more(first: int, late_at: int) -> None:
        _produce_records(spark, broker.bootstrap, topic, [("z", late_at)])
        produce_events(spark, broker.bootstrap, topic, first, 60)

    produce_events(spark, broker.bootstrap, topic, 0, 60)
    more(60, 5)

    def finals_in_a_later_batch() -> bool:
        # Not in the query's first batch (first_batch_committed says why): the rest of the input arrives
        # once batch 0 has committed, and the kill comes inside a later batch that has written finals.
        if not produced and first_batch_committed(tmp_path / "ckpt"):
            more(120, 15)
            produced.append(True)
        return any(int(name[:5]) >= 1 and text for name, text in epoch_texts(out).items())
    # SIGKILLed (driver JVM and all) inside a real-time batch that has written final results
    kill_when("realtime_kill_child.py", args, finals_in_a_later_batch)
    more(180, 25)
    both = expected_finals(239)

    def settled() -> bool:
        # every final is out and a later batch has opened its files: a repeat would be written by now
        return both <= set(file_rows(out)) and later_batch_opened(out)
    kill_when("realtime_kill_child.py", args, settled)
    rows = file_rows(out)
    assert len(rows) == len(set(rows)), "a final result written twice"
    assert set(rows) == both
    kept = sorted((r.key, int(r.ts.timestamp()) - BASE) for r in spark.read.parquet(str(late)).collect())
    assert kept == [("z", 5), ("z", 15), ("z", 25)]


def test_turning_late_records_on_for_a_real_time_checkpoint_is_refused_at_start_saying_why(
        rt, tmp_path: Path) -> None:
    """Under the real-time trigger late records kept add a hidden column to the aggregation's state: a restart
    that turns them on is refused when it starts, naming how the checkpoint was written and how to go on."""
    spark, broker = rt
    topic = _events_topic(spark, broker, "evswitch", 30)
    want = expected_finals(29)
    _run_to(spark, broker, _windowed(spark, broker, topic), "switch", tmp_path, until=lambda rows: set(rows) >= want,
            commit=True)
    with_late = windowed_finals(spark, broker.bootstrap, topic, late=str(tmp_path / "late"))
    message = _failure(_finals_query(spark, broker, with_late, "switch", tmp_path / "switch", {"realTime": BATCH}))
    assert ("the aggregation below it was written by a real-time run without late records kept, and this is a "
            "real-time run keeping late records") in message, message
    assert "Run the query as it was written, or start it on a new checkpoint" in message, message


def test_an_explicit_allowlist_check_refuses_suppress_saying_why(rt, tmp_path: Path) -> None:
    spark, broker = rt
    final = sluice.suppress(_counts(spark, broker), sluice.Suppressed.until_window_closes(sluice.BufferConfig.unbounded()))
    with session_conf(spark, {"spark.sql.streaming.realTimeMode.allowlistCheck": "true"}):
        message = _refusal(spark, broker, final, "allowlisted", tmp_path)
    assert "spark.sql.streaming.realTimeMode.allowlistCheck=true is set explicitly" in message
    assert "Unset spark.sql.streaming.realTimeMode.allowlistCheck" in message


def test_spark_still_refuses_a_non_allowlisted_operator_next_to_suppress(rt, tmp_path: Path) -> None:
    spark, broker = rt
    final = sluice.suppress(_counts(spark, broker), sluice.Suppressed.until_window_closes(sluice.BufferConfig.unbounded()))
    # a coalesce above suppress is not on Spark's allowlist: Spark's own error, though sluice turned its check off
    sorted_final = final.coalesce(1)
    message = _refusal(spark, broker, sorted_final, "sorted", tmp_path)
    assert "STREAMING_REAL_TIME_MODE.OPERATOR_OR_SINK_NOT_IN_ALLOWLIST" in message or "allowlist" in message.lower()
    assert "CoalesceExec" in message
    assert "SuppressExec" not in message


def test_the_input_bound_source_option_is_refused(rt, tmp_path: Path) -> None:
    spark, broker = rt
    src = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
           .option("subscribe", "in").option("startingOffsets", "earliest")
           .option("sluice.maxBytesPerTrigger", "100000").load())
    df = src.withWatermark("timestamp", "1 second").groupBy(F.window("timestamp", "1 minute"), "key").count()
    message = _refusal(spark, broker, df, "bounded_input", tmp_path)
    assert "The input bound (source option sluice.maxBytesPerTrigger=100000)" in message
    assert "maxPartitionFetchBytes" in message


@pytest.mark.parametrize("provider", ["sluice.cache.CachingStateStoreProvider",
                                      "sluice.windowstore.InMemoryWindowStoreProvider"])
def test_spark_itself_refuses_other_providers_than_its_rocksdb_in_real_time_mode(rt, tmp_path: Path,
                                                                                provider: str) -> None:
    spark, broker = rt
    with session_conf(spark, {PROVIDER: provider}):
        with pytest.raises(Exception, match="providerClass must be org.apache.spark.sql.execution.streaming.state"
                                            ".RocksDBStateStoreProvider"):
            _start(spark, broker, _counts(spark, broker), "provider" + provider.rsplit(".", 1)[1], tmp_path)


def _sessions(spark: SparkSession, broker: kh.Broker) -> DataFrame:
    src = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
           .option("subscribe", "in").option("startingOffsets", "earliest").load())
    return src.withWatermark("timestamp", "1 second").groupBy(F.session_window("timestamp", "5 seconds"), "key").count()


@pytest.mark.parametrize("final", ["none", "fused", "unfused"])
def test_session_windows_in_update_mode_are_refused_naming_why_and_what_to_use(rt, tmp_path: Path,
                                                                               final: str) -> None:
    """sluice's session windows in update mode (alone, and under suppress until_window_closes, fused
    into the aggregation or not): refused in one line when the first batch is planned, before
    Spark's allowlist would name the sort, merge and restore operators sluice plans them with."""
    spark, broker = rt
    df = _sessions(spark, broker)
    if final != "none":
        df = sluice.suppress(df, sluice.Suppressed.until_window_closes(sluice.BufferConfig.unbounded()))
    with session_conf(spark, {"spark.sluice.suppress.fused": str(final == "fused").lower()}):  # read at the start
        message = _refusal(spark, broker, df, f"sessions_{final}", tmp_path)
    line = next(m for m in message.splitlines() if "session_window" in m)
    assert "A session window aggregation (session_window) in update mode" in line
    assert "does not run under Spark's real-time trigger" in line
    assert "Spark plans no session windows in real-time mode" in line and "sorted by key and session start" in line
    assert "Start the query with a processing-time trigger" in line
    assert "NOT_IN_ALLOWLIST" not in message and "suppress does not run" not in message


def test_spark_itself_refuses_an_append_mode_session_window_in_real_time_mode(rt, tmp_path: Path) -> None:
    """Spark's own session windows (append mode, no sluice operator): Spark refuses append mode under
    the real-time trigger at start(), with its own error."""
    spark, broker = rt
    df = _sessions(spark, broker).selectExpr("to_json(struct(key, count)) as value")
    with pytest.raises(Exception, match="STREAMING_REAL_TIME_MODE.OUTPUT_MODE_NOT_SUPPORTED"):
        (df.writeStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("topic", "sessions_append").outputMode("append").option("checkpointLocation", str(tmp_path / "a"))
         .trigger(realTime="5 seconds").start())


def test_the_json_decoder_decodes_in_real_time_too(rt, tmp_path: Path) -> None:
    """The JSON decoder is an optimizer rule, so a real-time query's plan gets it as a micro-batch's
    does: switched on, the query that parses each record with from_json decodes with sluice's decoder
    and counts every record, as it does with Spark's parser."""
    spark, broker = rt
    key = "spark.sluice.json.decoder"
    src = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
           .option("subscribe", "in").option("startingOffsets", "earliest").load())
    # a JSON text per record, built so that the optimizer cannot fold the parse away
    text = F.concat(F.lit('{"o": '), F.col("offset").cast("string"), F.lit("}"))
    df = (src.select("key", "timestamp", F.from_json(text, "o long").alias("e"))
          .withWatermark("timestamp", "1 second").groupBy(F.window("timestamp", "1 minute"), "key")
          .agg(F.count("*").alias("count"), F.max("e.o").alias("m"))
          .selectExpr("to_json(struct(key, cast(window.end as long) as end, count, m)) as value"))
    plans = {}
    for on in (True, False):
        name = f"rewrite_json_decoder_{str(on).lower()}"
        kh.create_topic(spark, broker.bootstrap, name, 1)
        with session_conf(spark, {key: "sluice" if on else "spark"}):
            q = (df.writeStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
                 .option("topic", name).outputMode("update").option("checkpointLocation", str(tmp_path / name))
                 .trigger(realTime=BATCH).start())
        try:
            rows = _await(spark, broker, q, name, until=lambda rows: sum(_latest(rows).values()) >= RECORDS)
            assert sum(_latest(rows).values()) == RECORDS
            plan = q._jsq.explainInternal(False)
        finally:
            q.stop()
        plans[on] = plan
    assert "sluice_from_json(" in plans[True], plans[True]
    assert "sluice_from_json" not in plans[False] and "from_json(" in plans[False], plans[False]


def _produce_records(spark: SparkSession, bootstrap: str, topic: str, records: list[tuple[str, int]]) -> None:
    """`records` (key, seconds after BASE) in order into partition 0 of `topic`."""
    (spark.createDataFrame([(k, f'{{"ts": {BASE + s}}}') for k, s in records], "key string, value string")
     .coalesce(1)  # one writing task, in the list's order
     .selectExpr("cast(0 as int) as partition", "cast(key as binary) key", "cast(value as binary) value")
     .write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save())


def test_late_records_are_kept_once_each_across_a_restart(rt, tmp_path: Path) -> None:
    """with_late_records under the real-time trigger: every record for a window the partition's stream time
    already closed (suppress drops its row; the aggregation below drops none at Spark's watermark) is
    written once to the batch that dropped it, with its window, key,
    event time and lateness; the finals are those without the late records; a restart keeps the next
    late records and writes none of the earlier ones again."""
    spark, broker = rt
    topic = _events_topic(spark, broker, "evlate", 40)  # k0..k2 at BASE + 0..39 s: windows to BASE + 30 close
    _produce_records(spark, broker.bootstrap, topic, [("z", 5), ("z", 15)])  # windows closed long before
    late = tmp_path / "late"
    final = sluice.suppress(windowed_counts(spark, broker.bootstrap, topic), sluice.Suppressed.until_window_closes(
        sluice.BufferConfig.unbounded()).with_late_records(str(late)))

    def kept() -> list[tuple]:
        if not late.exists():
            return []
        rows = spark.read.parquet(str(late)).collect()
        return sorted((int(r.window.start.timestamp()) - BASE, r.key, int(r.ts.timestamp()) - BASE, r.late_by_ms,
                       r.batch_id) for r in rows)

    def late_drops(progress: list) -> dict[int, int]:
        """Per batch with late drops, suppress's lateRecordDropTotal."""
        reports = [json.loads(p.json) for p in progress]
        drops = {p["batchId"]: sum(op.get("customMetrics", {}).get("lateRecordDropTotal", 0)
                                   for op in p["stateOperators"]) for p in reports}
        return {b: n for b, n in drops.items() if n}

    def per_batch(records: list[tuple]) -> dict[int, int]:
        return dict(Counter(r[4] for r in records))

    want = expected_finals(39)
    progress: list = []
    out = _run_to(spark, broker, final, "lates", tmp_path, until=lambda rows: set(rows) >= want, commit=True,
                  progress=progress)
    assert len(out) == len(set(out)) and set(out) == want
    first = kept()
    assert per_batch(first) == late_drops(progress)  # each batch keeps the records it counts as late
    assert [r[:3] for r in first] == [(0, "z", 5), (10, "z", 15)]
    # How far the close was past each window's end: at most stream time (BASE + 39 s) minus the grace
    # (2 s) minus the end.
    assert all(0 < r[3] <= (37 - r[0] - 10) * 1000 for r in first)

    _produce_records(spark, broker.bootstrap, topic, [("z", 25), *[(f"k{i % 3}", i) for i in range(40, 60)]])
    want = expected_finals(59)
    progress = []
    out = _run_to(spark, broker, final, "lates", tmp_path, until=lambda rows: set(rows) >= want, commit=True,
                  progress=progress)
    assert len(out) == len(set(out)) and set(out) == want
    again = kept()
    assert per_batch(again[2:]) == late_drops(progress)
    assert [r[:3] for r in again] == [(0, "z", 5), (10, "z", 15), (20, "z", 25)]
    assert again[:2] == first  # the first run's records, as they were, once
    assert 0 < again[2][3] <= (37 - 30) * 1000 and again[2][4] > first[1][4]

