"""spark-4.3: Spark's real-time trigger (stateful queries, Kafka only) with sluice configured: a real-time
query without sluice's stateful features runs as it does without sluice (the extensions and the
input bound stay out of its way), suppress's until_window_closes and
until_time_limit run per row on each partition's stream time; each other sluice feature that works at
batch boundaries is refused when the query plans a batch, naming itself, why and what to use instead."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Iterator

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import kafka_harness as kh
import sluice
from conftest import sluice_session, stop_session

pytestmark = pytest.mark.skipif(kh.spark_minor() < "4.3", reason="stateful real-time mode arrived in Spark 4.3")

PROVIDER = "spark.sql.streaming.stateStore.providerClass"
RECORDS = 300


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SparkSession, kh.Broker]]:
    broker = kh.Broker(tmp_path_factory.mktemp("kafka")).start()
    jars = kh.connector_jars()
    stop_session()
    kh.ensure_driver_jars(jars)
    # one input partition and one shuffle partition: real-time mode runs every task at once (2 slots);
    # local[4] leaves slots for the tests' own reads of the output topic while a batch runs
    spark = sluice_session("local[4]", conf={"spark.jars": ",".join(jars), "spark.sql.shuffle.partitions": "1"})
    kh.create_topic(spark, broker.bootstrap, "in", 1)
    kh.produce(spark, broker.bootstrap, "in", RECORDS, 1, min_bytes=10, max_bytes=20)
    yield spark, broker
    stop_session()
    broker.stop()


def _counts(spark: SparkSession, broker: kh.Broker) -> DataFrame:
    src = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
           .option("subscribe", "in").option("startingOffsets", "earliest").load())
    return src.withWatermark("timestamp", "1 second").groupBy(F.window("timestamp", "1 minute"), "key").count()


def _start(spark: SparkSession, broker: kh.Broker, df: DataFrame, name: str, tmp_path: Path):
    kh.create_topic(spark, broker.bootstrap, name, 1)
    return (df.selectExpr("to_json(struct(key, count)) as value").writeStream.format("kafka")
            .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", name).outputMode("update")
            .option("checkpointLocation", str(tmp_path / name)).trigger(realTime="5 seconds").start())


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


BASE = 1_700_000_000  # event times are whole seconds from here: deterministic windows
WINDOW = "10 seconds"


def _produce_events(spark: SparkSession, broker: kh.Broker, topic: str, first: int, count: int) -> None:
    """Records first..first+count-1 in order into one partition: key k<i % 3>, event time BASE + i s."""
    (spark.range(first, first + count, numPartitions=1)
     .selectExpr("cast(0 as int) as partition", "cast(concat('k', pmod(id, 3)) as binary) as key",
                 f"cast(to_json(named_struct('ts', {BASE} + id)) as binary) as value")
     .write.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic).save())


def _windowed(spark: SparkSession, broker: kh.Broker, topic: str) -> DataFrame:
    src = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
           .option("subscribe", topic).option("startingOffsets", "earliest").load())
    events = src.selectExpr("cast(key as string) key",
                            "timestamp_seconds(cast(get_json_object(cast(value as string), '$.ts') as long)) ts")
    counts = events.withWatermark("ts", "2 seconds").groupBy(F.window("ts", WINDOW), "key").count()
    return sluice.suppress(counts, sluice.Suppressed.until_window_closes(sluice.BufferConfig.unbounded()))


def _finals_query(spark: SparkSession, broker: kh.Broker, df: DataFrame, out: str, checkpoint: Path, trigger: dict):
    return (df.selectExpr("to_json(struct(key, cast(window.end as long) as end, count)) as value")
            .writeStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap).option("topic", out)
            .outputMode("update").option("checkpointLocation", str(checkpoint)).trigger(**trigger).start())


def _read(spark: SparkSession, broker: kh.Broker, topic: str) -> list[tuple[str, int, int]]:
    rows = (spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap).option("subscribe", topic)
            .option("startingOffsets", "earliest").load().selectExpr("cast(value as string) value").collect())
    return [(d["key"], d["end"], d["count"]) for d in (json.loads(r.value) for r in rows)]


def _expected(last: int) -> set[tuple[str, int, int]]:
    """The final results of records 0..last: every (key, window) whose end is at or below the
    watermark (max event time - 2 s), with its count."""
    counts: dict[tuple[str, int], int] = {}
    for i in range(last + 1):
        end = BASE + (i // 10 + 1) * 10
        counts[(f"k{i % 3}", end)] = counts.get((f"k{i % 3}", end), 0) + 1
    return {(k, end, n) for (k, end), n in counts.items() if end <= BASE + last - 2}


def _await(spark, broker, q, topic: str, n: int, timeout: float = 180.0) -> list[tuple[str, int, int]]:
    deadline = time.monotonic() + timeout
    out: list = []
    while time.monotonic() < deadline:
        assert q.isActive, q.exception()
        out = _read(spark, broker, topic)
        if len(out) >= n:
            return out
        time.sleep(0.5)
    raise AssertionError(f"{len(out)} of {n} final results after {timeout} s")


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
    _produce_events(spark, broker, "ev", 0, 120)
    first = _expected(119)
    q = _finals_query(spark, broker, _windowed(spark, broker, "ev"), "rtfinals", tmp_path / "rt",
                      {"realTime": "5 seconds"})
    try:
        out = _await(spark, broker, q, "rtfinals", len(first))
        _stop_at_a_batch_boundary(q)
    finally:
        q.stop()
    assert len(out) == len(set(out)), "a final result emitted twice"
    assert set(out) == first
    assert set(out) == set(_micro_batch_finals(spark, broker, "ev", tmp_path, "mbfinals1", len(first)))

    # restart on the checkpoint with more input: no final twice, none lost
    _produce_events(spark, broker, "ev", 120, 60)
    both = _expected(179)
    q = _finals_query(spark, broker, _windowed(spark, broker, "ev"), "rtfinals", tmp_path / "rt",
                      {"realTime": "5 seconds"})
    try:
        out = _await(spark, broker, q, "rtfinals", len(both))
        time.sleep(6)  # a batch more: anything emitted twice would show
        out = _read(spark, broker, "rtfinals")
    finally:
        q.stop()
    assert len(out) == len(set(out)), "a final result emitted twice across the restart"
    assert set(out) == both
    assert set(out) == set(_micro_batch_finals(spark, broker, "ev", tmp_path, "mbfinals2", len(both)))


def test_suppress_until_time_limit_runs_per_row_on_stream_time(rt, tmp_path: Path) -> None:
    spark, broker = rt
    kh.create_topic(spark, broker.bootstrap, "evlimit", 1)
    kh.create_topic(spark, broker.bootstrap, "limited", 1)
    _produce_events(spark, broker, "evlimit", 0, 60)
    src = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
           .option("subscribe", "evlimit").option("startingOffsets", "earliest").load())
    counts = (src.selectExpr("cast(key as string) key",
                             "timestamp_seconds(cast(get_json_object(cast(value as string), '$.ts') as long)) ts")
              .withWatermark("ts", "2 seconds").groupBy(F.window("ts", WINDOW), "key")
              .agg(F.count("*").alias("count"), F.max("ts").alias("ts")))
    limited = sluice.suppress(counts, sluice.Suppressed.until_time_limit(5, sluice.BufferConfig.unbounded()),
                              time_col="ts")
    q = _finals_query(spark, broker, limited, "limited", tmp_path / "limited", {"realTime": "5 seconds"})
    try:
        # each (key, window) is buffered at its first record's time and released once stream time is
        # 5 s past it: with one record per second that is within its window or soon after
        expected = {(k, end) for (k, end, _) in _expected(59) if end <= BASE + 59 - 5}
        out = _await(spark, broker, q, "limited", len(expected))
    finally:
        q.stop()
    assert expected <= {(k, end) for (k, end, _) in out}


def _refusal(spark, broker, df: DataFrame, name: str, tmp_path: Path) -> str:
    return _failure(_start(spark, broker, df, name, tmp_path))


def test_what_suppress_does_not_do_in_real_time_is_refused_naming_why_and_what_to_use(rt, tmp_path: Path) -> None:
    spark, broker = rt
    wall = sluice.suppress(_counts(spark, broker),
                           sluice.Suppressed.until_wall_clock_time_limit(1, sluice.BufferConfig.unbounded()))
    message = _refusal(spark, broker, wall, "wallclock", tmp_path)
    assert "suppress(untilWallClockTimeLimit" in message and "does not run under Spark's real-time trigger" in message
    assert "Use until_time_limit" in message and "trigger(processingTime=" in message
    bounded = sluice.suppress(_counts(spark, broker), sluice.Suppressed.until_window_closes(
        sluice.BufferConfig.max_records(10).shut_down_when_full()))
    message = _refusal(spark, broker, bounded, "bounded", tmp_path)
    assert "suppress with a bounded buffer" in message and "Use BufferConfig.unbounded()" in message


def test_an_explicit_allowlist_check_refuses_suppress_saying_why(rt, tmp_path: Path) -> None:
    spark, broker = rt
    final = sluice.suppress(_counts(spark, broker), sluice.Suppressed.until_window_closes(sluice.BufferConfig.unbounded()))
    spark.conf.set("spark.sql.streaming.realTimeMode.allowlistCheck", "true")
    try:
        message = _refusal(spark, broker, final, "allowlisted", tmp_path)
    finally:
        spark.conf.unset("spark.sql.streaming.realTimeMode.allowlistCheck")
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


def test_the_emission_cache_is_refused_naming_its_key(rt, tmp_path: Path) -> None:
    spark, broker = rt
    spark.conf.set("spark.sluice.commit.interval.ms", "1000")
    try:
        message = _failure(_start(spark, broker, _counts(spark, broker), "emitcache", tmp_path))
    finally:
        spark.conf.unset("spark.sluice.commit.interval.ms")
    assert "The emission cache (spark.sluice.commit.interval.ms=1000) does not run under Spark's real-time" in message
    assert "Set spark.sluice.commit.interval.ms=0 for this query" in message


@pytest.mark.parametrize("provider", ["sluice.cache.CachingStateStoreProvider",
                                      "sluice.windowstore.InMemoryWindowStoreProvider"])
def test_spark_itself_refuses_other_providers_than_its_rocksdb_in_real_time_mode(rt, tmp_path: Path,
                                                                                provider: str) -> None:
    spark, broker = rt
    spark.conf.set(PROVIDER, provider)
    try:
        with pytest.raises(Exception, match="providerClass must be org.apache.spark.sql.execution.streaming.state"
                                            ".RocksDBStateStoreProvider"):
            _start(spark, broker, _counts(spark, broker), "provider" + provider.rsplit(".", 1)[1], tmp_path)
    finally:
        spark.conf.unset(PROVIDER)
