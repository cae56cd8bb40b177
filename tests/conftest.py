"""The tests' fixtures and the markers their folders give them; a folder's conftest.py adds fixtures of
its own (suppress's and the session windows' `run` and `provider`, defined in support.suppress). What
tests share besides fixtures is in the support package (support/__init__.py says which module holds
what); no test module imports another."""
from __future__ import annotations

import os
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

# The files that take minutes, longest first (summed test times in CI's run on Spark 4.3, 2026-12-07;
# test_spark_upgrade.py's and test_late_records_delta.py's in 4.2's cross-version half), run before the
# rest: pytest-xdist hands whole files to its workers in collection order, and a long file handed out
# last keeps one worker busy while the others have nothing left to take. Their tests are marked `slow`.
LONG_FILES = ("test_sessions.py", "test_suppress_fused.py", "test_realtime.py", "test_late_records.py",
              "test_crash_soak.py", "test_suppress.py", "test_composition.py", "test_multi_executor.py",
              "test_cache.py", "test_cache_writebehind.py", "test_input_kafka.py", "test_late_records_stream.py",
              "test_realtime_composition.py", "test_cache_emit.py", "test_spark_upgrade.py",
              "test_late_records_delta.py", "test_connect.py", "test_install.py")


# SLUICE_COMBINATIONS=each (dev/test sets it for CI's shares): a test parametrized over two or more
# parameters runs a set of its cases that gives every value of every parameter at least once (each
# provider, each mode), not every combination; `dev/test --spark X` without --share or --subset runs
# them all. SLUICE_CASE_HALF=0 or 1 (CI's cross-version halves): of the cases of a parametrized test
# marked every_minor, the half runs every other one, starting with the first or the second, so the two
# other minors share them as they share the composition matrix. Tests marked every_combination (the
# composition matrices, whose point is the combinations, chosen by their own settings) run every case
# they collect.
COMBINATIONS = os.environ.get("SLUICE_COMBINATIONS", "all")
CASE_HALF = os.environ.get("SLUICE_CASE_HALF", "")


def pytest_configure(config: pytest.Config) -> None:
    if COMBINATIONS not in ("all", "each"):
        raise pytest.UsageError(f"SLUICE_COMBINATIONS is '{COMBINATIONS}'; expected 'all' or 'each'")
    if CASE_HALF not in ("", "0", "1"):
        raise pytest.UsageError(f"SLUICE_CASE_HALF is '{CASE_HALF}'; expected 0, 1 or unset")
    configure_test_jvms()


def each_value_once(cases: list[pytest.Item]) -> list[pytest.Item]:
    """The cases of one test function to run so that every value of every parameter runs at least
    once: greedily the case giving the most values not yet run, the earliest collected on a tie
    (the same choice in every run and on every worker, which pytest-xdist requires)."""
    values = [{(str(names), repr(tuple(c.callspec.params[n] for n in names)))  # type: ignore[attr-defined]
               for names in parameters(c)} for c in cases]
    left = set().union(*values)
    chosen: set[int] = set()
    while left:
        best = max(range(len(cases)), key=lambda i: len(values[i] & left))  # max keeps the first of equals
        chosen.add(best)
        left -= values[best]
    return [c for i, c in enumerate(cases) if i in chosen]


def parameters(item: pytest.Item) -> list[tuple[str, ...]]:
    """A case's parameters: the names of each `parametrize` (`"before,after"` is one parameter, its
    pairs its values) and each parametrized fixture."""
    params = getattr(item, "callspec", None)
    given = set(params.params) if params is not None else set()
    found: list[tuple[str, ...]] = []
    for mark in item.iter_markers("parametrize"):
        names = mark.args[0]
        names = tuple(n.strip() for n in (names.split(",") if isinstance(names, str) else names))
        if set(names) <= given and names not in found:
            found.append(names)
    grouped = {n for names in found for n in names}
    return found + [(n,) for n in sorted(given - grouped)]


def select_cases(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselects the cases SLUICE_COMBINATIONS and SLUICE_CASE_HALF leave out (above)."""
    groups: dict[tuple[str, str], list[pytest.Item]] = {}
    for item in items:
        if parameters(item) and item.get_closest_marker("every_combination") is None:
            groups.setdefault((str(item.path), item.originalname), []).append(item)  # type: ignore[attr-defined]
    dropped = []
    for cases in groups.values():
        run = each_value_once(cases) if COMBINATIONS == "each" and len(parameters(cases[0])) >= 2 else cases
        if CASE_HALF and cases[0].get_closest_marker("every_minor") is not None:  # what both halves run
            run = run[int(CASE_HALF)::2]
        kept = {id(c) for c in run}
        dropped += [c for c in cases if id(c) not in kept]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        ids = {id(c) for c in dropped}
        items[:] = [item for item in items if id(item) not in ids]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    select_cases(config, items)
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
