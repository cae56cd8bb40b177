"""Shared SparkSession handling: one local[2] session reused across modules while its settings
match, so the suite pays JVM startup only when a test needs different SparkConf."""
from __future__ import annotations

from typing import Any, Iterator

import pytest
from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

import sluice

BASE_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.sql.streaming.stopTimeout": "30s",
    "spark.driver.memory": "2g",
    "spark.sql.session.timeZone": "UTC",
    # Spark's maintenance thread is one per JVM and keeps the interval of the first session that
    # started it: the same short interval everywhere keeps snapshot/cleanup tests order-independent.
    "spark.sql.streaming.stateStore.maintenanceInterval": "1s",
}

_current: dict[str, Any] = {"key": None, "spark": None}


def sluice_session(master: str = "local[2]", conf: dict[str, str] | None = None,
                   **options: Any) -> SparkSession:
    """A SparkSession with sluice configured; reuses the running one when the settings match."""
    key = (master, tuple(sorted((conf or {}).items())), tuple(sorted(options.items())))
    if _current["key"] == key and _current["spark"] is not None:
        return _current["spark"]
    stop_session()
    builder = fresh_builder().master(master).appName("sluice-tests")
    for k, v in {**BASE_CONF, **(conf or {})}.items():
        builder = builder.config(k, v)
    spark = sluice.configure(builder, **options).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    _current.update(key=key, spark=spark)
    return spark


def fresh_builder() -> SparkSession.Builder:
    """A builder whose settings all reach the new SparkContext: the py4j gateway is launched first
    with only the sluice jar (for the driver's class path), since pyspark passes the first
    context's conf to the JVM as system properties that every later context would inherit."""
    SparkContext._ensure_initialized(conf=SparkConf().set("spark.jars", sluice.jar_path()))
    return SparkSession.builder


def stop_session() -> None:
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    if _current["spark"] is not None:
        _current["spark"].stop()
    _current.update(key=None, spark=None)


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    yield sluice_session()


@pytest.fixture(params=["hdfs", "rocksdb"])
def provider(request: pytest.FixtureRequest, spark: SparkSession) -> Iterator[str]:
    """Runs a test once per built-in state store provider (set per query, recorded in the checkpoint)."""
    classes = {
        "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
        "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    }
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", classes[request.param])
    yield request.param
    spark.conf.unset("spark.sql.streaming.stateStore.providerClass")
