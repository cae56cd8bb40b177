"""Every feature on more than one executor: combinations from the composition matrix
(test_composition.py, same input, same expectations, same stop and restart on the checkpoint) run
on `local-cluster[2,1,1024]`, two executor JVMs of one task slot each, so the two state partitions
of each stateful operator live in different processes with their own record cache, slot budget,
window stores and suppress indexes. Between them the cases cover suppress (fused and unfused,
both modes), the record cache with write-behind, the emission cache, the in-memory window store
(as provider and as the cache's delegate) and the input bound, on all three providers.
"""
from __future__ import annotations

import json
import urllib.request
from typing import Any, Iterator

import pytest
from pyspark.sql import SparkSession

from support.composition import CACHE_BYTES, Combo, check, run_all
from support.session import session_conf, sluice_session

CASES = [
    Combo("hdfs", True, "window_closes", "1h", True),
    Combo("rocksdb", True, "update", "1h", True),
    Combo("in_memory_window", True, "time_limit", "1h", False),
    Combo("in_memory_window", False, "window_closes", "0", False),
    Combo("rocksdb", False, "time_limit", "0", True),
    Combo("hdfs", False, "update", "1h", False),
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[SparkSession]:
    yield sluice_session(master="local-cluster[2,1,1024]", statestore_cache_max_bytes=CACHE_BYTES,
                         conf={"spark.executor.memory": "512m", "spark.ui.enabled": "true",
                               "spark.ui.port": "0"})


@pytest.fixture(scope="module")
def runs(cluster: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[Combo, Any]:
    return run_all(cluster, tmp_path_factory.mktemp("multi"), CASES)


def tasks_by_executor(spark: SparkSession) -> dict[str, int]:
    sc = spark.sparkContext
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/executors"
    with urllib.request.urlopen(url, timeout=30) as r:
        return {e["id"]: e["totalTasks"] for e in json.load(r) if e["id"] != "driver"}


@pytest.mark.parametrize("combo", CASES, ids=[c.id for c in CASES])
def test_feature_on_two_executors(runs: dict[Combo, Any], combo: Combo) -> None:
    check(runs[combo], combo)


def test_both_executors_ran_the_queries(cluster: SparkSession, runs: dict[Combo, Any]) -> None:
    tasks = tasks_by_executor(cluster)
    assert len(tasks) == 2 and all(n > 0 for n in tasks.values()), tasks


def test_session_windows_on_two_executors(cluster: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Session windows in update mode, and their final results through the suppress operator
    (unfused), with the two state partitions in different executor JVMs: the same results as on
    one (tests/sessions/test_sessions.py)."""
    from collections import Counter

    from sluice import BufferConfig, Suppressed, suppress
    from support.sessions import BATCHES, append_mode_finals, feed_all, key, sessions, table_of
    from support.suppress import Run
    tmp = tmp_path_factory.mktemp("sessions")
    updates = Run(cluster, tmp / "updates")
    try:
        updates.start(sessions(updates.events()))
        feed_all(updates, BATCHES)
        assert table_of(updates) == append_mode_finals(cluster, updates.src, tmp / "reference")
    finally:
        updates.stop()
    finals = Run(cluster, tmp / "finals")
    with session_conf(cluster, {"spark.sluice.suppress.fused": "false"}):
        try:
            finals.start(suppress(sessions(finals.events()), Suppressed.until_window_closes(BufferConfig.unbounded())))
            feed_all(finals, BATCHES)
            rows = finals.rows()
            want = append_mode_finals(cluster, finals.src, tmp / "again")
            assert Counter(key(r) for r in rows) == Counter(want.keys())
        finally:
            finals.stop()
