"""spark-4.3: Spark's real-time trigger (stateful queries, Kafka only) with sluice configured: a real-time
query without sluice's stateful features runs as it does without sluice (the extensions and the
input bound stay out of its way), and each sluice feature that works at batch boundaries is
refused when the query plans its first batch, naming itself, why and what to use instead."""
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
    # one input partition and one shuffle partition: real-time mode runs every task at once (2 slots)
    spark = sluice_session(conf={"spark.jars": ",".join(jars), "spark.sql.shuffle.partitions": "1"})
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


def test_suppress_is_refused_naming_why_and_what_to_use(rt, tmp_path: Path) -> None:
    spark, broker = rt
    final = sluice.suppress(_counts(spark, broker), sluice.Suppressed.until_window_closes(sluice.BufferConfig.unbounded()))
    message = _failure(_start(spark, broker, final, "suppressed", tmp_path))
    assert "suppress does not run under Spark's real-time trigger yet" in message
    assert "trigger(processingTime=" in message


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
