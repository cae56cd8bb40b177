"""The tests' fixtures and the markers their folders give them; a folder's conftest.py adds fixtures of
its own (suppress's and the session windows' `run` and `provider`, defined in support.suppress). What
tests share besides fixtures is in the support package (support/__init__.py says which module holds
what); no test module imports another."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from pyspark.sql import SparkSession

from support import kafka as kh
from support.session import configure_test_jvms, sluice_session

TESTS = Path(__file__).resolve().parent

# The feature folders: each gives its tests the marker of its name (registered in pyproject.toml), so
# `pytest -m suppress` runs suppress's tests wherever they are. Named as the features' pages
# (docs/features) and Scala packages (jvm/src/main/scala/sluice) name them.
FEATURES = ("suppress", "sessions", "cache", "windowstore", "input", "realtime", "experimental", "state",
            "composition", "connect", "testing", "product")

# The files that take minutes, longest first (summed test times, 2026-11-26; test_spark_upgrade.py's,
# in 4.2's cross-version half, 2026-12-06), run before the rest: pytest-xdist hands whole files to its
# workers in collection order, and a long file handed out last keeps one worker busy while the other
# has nothing left to take. Their tests are marked `slow`.
LONG_FILES = ("test_sessions.py", "test_composition.py", "test_suppress.py", "test_crash_soak.py",
              "test_install.py", "test_spark_upgrade.py", "test_cache_writebehind.py", "test_multi_executor.py",
              "test_realtime.py", "test_connect.py", "test_late_records_delta.py")


def pytest_configure(config: pytest.Config) -> None:
    configure_test_jvms()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        folder = item.path.relative_to(TESTS).parts[0]
        assert folder in FEATURES, f"{item.path}: a test module belongs in a feature folder ({', '.join(FEATURES)})"
        item.add_marker(folder)
        if item.path.name in LONG_FILES:
            item.add_marker("slow")
        if "broker" in getattr(item, "fixturenames", ()):
            item.add_marker("kafka")
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FILES)))  # stable: a file keeps its order


@pytest.hookimpl(tryfirst=True)  # before the fixtures (a broker) are set up
def pytest_runtest_setup(item: pytest.Item) -> None:
    """`@pytest.mark.spark("4.3")`: the test needs that Spark minor or a later one, and skips on earlier ones."""
    for mark in item.iter_markers("spark"):
        if kh.spark_minor() < mark.args[0]:
            pytest.skip(f"needs Spark {mark.args[0]} or later ({mark.kwargs.get('reason', 'see the test')})")


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    yield sluice_session()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real Kafka broker (support.kafka.Broker) for the module's tests."""
    b = kh.Broker(tmp_path_factory.mktemp("kafka")).start()
    yield b
    b.stop()


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
