"""Stopping a stateful query while a batch runs logs nothing on sluice's in-memory window store
that Spark's own providers (HDFS-backed, RocksDB) do not, and no StackOverflowError on any: with a
sink, and with a foreachBatch function running the batch as a job. spark-4.1: there Spark's own stop
check overflows the stack on py4j's long error text unless `sluice.configure` is used (see sluice/_stop.py).
Whether the stop reaches the batch function as an interruption or as its job's cancellation is a
race, so each is also checked directly against Spark's stop check."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import traceback
import uuid
from pathlib import Path
from typing import Any

import pytest
from py4j.protocol import Py4JJavaError

HERE = Path(__file__).resolve().parents[1] / "support"  # stop_child.py
SHAPES = ("sink", "foreach_batch")
PROVIDERS = ("hdfs", "rocksdb", "window")


def _normalized(line: str) -> str:
    line = re.sub(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d(\.\d+)? ", "", line)
    line = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<id>", line)
    return re.sub(r"\d+", "<n>", line)


def _noteworthy(lines: list[str]) -> set[str]:
    """ERROR log lines, sluice's warnings and anything printed for an uncaught throwable, normalized."""
    return {_normalized(l) for l in lines
            if " ERROR " in l or (" WARN " in l and "sluice" in l.lower())
            or l.startswith("Exception in thread") or "StackOverflowError" in l}


def test_mid_batch_stop_logs_no_more_on_window_store_than_builtin_providers(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, str(HERE / "stop_child.py"), str(tmp_path), ",".join(PROVIDERS)],
                       cwd=HERE, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-5000:]
    results = [json.loads(l[7:]) for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    assert [(r["provider"], r["shape"]) for r in results] == [(n, s) for n in PROVIDERS for s in SHAPES]
    assert all(r["exception"] is None for r in results), results  # stopped, not failed

    runs: dict[tuple[str, str], list[str]] = {}
    current: list[str] | None = None
    for line in p.stderr.splitlines():
        m = re.fullmatch(r"=== (\w+) (\w+)( end)? ===", line)
        if m:
            current = None if m.group(3) else runs.setdefault((m.group(1), m.group(2)), [])
        elif current is not None:
            current.append(line)
    assert set(runs) == {(n, s) for n in PROVIDERS for s in SHAPES}
    assert "StackOverflowError" not in p.stderr
    for shape in SHAPES:
        builtin = _noteworthy(runs["hdfs", shape]) | _noteworthy(runs["rocksdb", shape])
        assert _noteworthy(runs["window", shape]) <= builtin, (shape, _noteworthy(runs["window", shape]) - builtin)


def _text_spark_gets(spark: Any, error: Exception) -> str:
    """What the JVM receives when a foreachBatch function raises `error`: pyspark's callback
    (as sluice.configure leaves it) runs the function, py4j sends back the formatted traceback."""
    from pyspark.sql.utils import ForeachBatchFunction

    def func(df: Any, batch_id: int) -> None:
        raise error

    try:
        ForeachBatchFunction(spark, func).call(spark.range(1)._jdf, 0)
    except Exception:
        return traceback.format_exc()
    raise AssertionError("the batch function's error was swallowed")


@pytest.mark.parametrize("java_error", ["interrupted", "cancelled job"])
def test_spark_sees_a_stop_in_a_foreach_batch_error_ended_by_the_stop(spark: Any, java_error: str) -> None:
    """Which of the two ends the batch function's job when the query stops is a race; both must
    reach Spark's stop check as a stop, short enough for its regex."""
    jvm, sc = spark._jvm, spark.sparkContext
    run_id = str(uuid.uuid4())
    if java_error == "interrupted":
        cause = jvm.org.apache.spark.SparkException("Job aborted", jvm.java.lang.InterruptedException())
    else:
        cause = jvm.org.apache.spark.SparkException(
            f"[SPARK_JOB_CANCELLED] Job 5 cancelled Query [id = {uuid.uuid4()}, runId = {run_id}] was stopped")
    sc.setLocalProperty("spark.jobGroup.id", run_id)  # as the query thread has it
    try:
        text = _text_spark_gets(spark, Py4JJavaError("An error occurred while calling o42.collectToPython.\n", cause))
        assert "\tat " not in text.split("Py4JJavaError", 1)[1]  # no Java stack trace after py4j's line
        stopped = jvm.org.apache.spark.sql.execution.streaming.runtime.StreamExecution.isInterruptionException(
            jvm.py4j.Py4JException(text), sc._jsc.sc())
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert stopped


def test_a_foreach_batch_error_not_ended_by_a_stop_reaches_spark_whole(spark: Any) -> None:
    """A cancelled job that is not the query's own (another job group) is an error, not a stop."""
    sc = spark.sparkContext
    cause = spark._jvm.org.apache.spark.SparkException(
        f"[SPARK_JOB_CANCELLED] Job 5 cancelled Query [id = {uuid.uuid4()}, runId = {uuid.uuid4()}] was stopped")
    error = Py4JJavaError("An error occurred while calling o42.collectToPython.\n", cause)
    sc.setLocalProperty("spark.jobGroup.id", str(uuid.uuid4()))
    try:
        text = _text_spark_gets(spark, error)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert str(error) in text  # the Java stack trace included, as py4j writes it
    assert "\tat " in text.split("Py4JJavaError", 1)[1]
