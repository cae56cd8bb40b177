"""A Spark Connect user of sluice, run by tests/connect/test_connect.py in its own process.

``python connect_client.py <work dir>`` starts a local Spark Connect server the way a user would
(``sluice.configure(SparkSession.builder.remote("local[2]"))``: pyspark starts the server in this
process's JVM and the session talks to it over gRPC), runs each scenario below on that Connect
session and writes ``<work dir>/results.json``: per scenario ``{"ok": result}`` or ``{"error": trace}``.
A process of its own because pyspark allows one kind of session per Python process (the test
process holds the suite's classic session).

``misuse_cases`` is also run by the test on the classic session, to compare the errors.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from pyspark import SparkConf, SparkContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for `support`, when run as a script
import sluice
from sluice import BufferConfig, Suppressed, suppress
from support import kafka as kh  # noqa: E402

SESSION_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "1g",
    "spark.metrics.conf.*.sink.jmx.class": "org.apache.spark.metrics.sink.JmxSink",
}
WATERMARK_DELAY_S = 10
WINDOW_S = 60
COMMIT_INTERVAL_KEY = "spark.sluice.commit.interval.ms"
KAFKA_BOOTSTRAP = "kafka_bootstrap"  # the broker's address, written by the test when it starts one


def events(spark: SparkSession, src: Path) -> DataFrame:
    """One input file per micro-batch, in modification-time order."""
    return (spark.readStream.schema("ts timestamp, user string").option("maxFilesPerTrigger", 1)
            .json(str(src)))


def windowed_counts(df: DataFrame) -> DataFrame:
    return (df.withWatermark("ts", f"{WATERMARK_DELAY_S} seconds")
            .groupBy(F.window("ts", f"{WINDOW_S} seconds"), "user").count())


UNBOUNDED = Suppressed.until_window_closes(BufferConfig.unbounded())
LIMIT = Suppressed.until_time_limit(30, BufferConfig.max_records(1000))


def misuse_cases(spark: SparkSession, src: Path) -> dict[str, Callable[[], Any]]:
    """Calls of suppress that must fail, by name."""
    ev = events(spark, src)
    per_user = ev.groupBy("user").agg(F.max("ts").alias("ts"), F.count("*").alias("n"))
    return {
        "batch": lambda: suppress(spark.range(3).groupBy("id").count(), LIMIT, time_col="id"),
        "not_aggregated": lambda: suppress(ev, LIMIT, time_col="ts"),
        "no_window": lambda: suppress(ev.groupBy("user").count(), UNBOUNDED),
        "no_watermark": lambda: suppress(ev.groupBy(F.window("ts", "1 hour"), "user").count(), UNBOUNDED),
        "no_time_col": lambda: suppress(per_user, LIMIT),
        "time_col_not_timestamp": lambda: suppress(per_user, LIMIT, time_col="n"),
        "time_col_unknown": lambda: suppress(per_user, LIMIT, time_col="nope"),
        "strict_only": lambda: suppress(windowed_counts(ev), Suppressed.until_window_closes(
            BufferConfig.max_records(10))),
    }


def describe(e: BaseException) -> dict[str, Any]:
    return {"type": f"{type(e).__module__}.{type(e).__qualname__}",
            "types": [c.__name__ for c in type(e).__mro__], "message": str(e).split("\n")[0]}


def progress(query: Any) -> list[dict]:
    return [json.loads(p.json) for p in query.recentProgress]


# --- scenarios ---------------------------------------------------------------------------------

def session_kind(spark: SparkSession, work: Path) -> dict[str, Any]:
    ev = events(spark, work / "final_in")
    return {"session": type(spark).__module__, "suppressed": type(suppress(windowed_counts(ev), UNBOUNDED)).__module__}


def final_results(spark: SparkSession, work: Path) -> dict[str, Any]:
    """A windowed count, suppressed until each window closes, into a memory sink."""
    final = suppress(windowed_counts(events(spark, work / "final_in")), UNBOUNDED)
    # The suppress operator itself (not fused into the aggregation): its metrics are checked too.
    spark.conf.set("spark.sluice.suppress.fused", "false")
    q = (final.writeStream.outputMode("update").format("memory").queryName("final_counts")
         .option("checkpointLocation", str(work / "final_ckpt")).start())
    spark.conf.unset("spark.sluice.suppress.fused")
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    rows = spark.sql("SELECT CAST(window.start AS LONG) AS start, user, count FROM final_counts").collect()
    ops = [op for p in progress(q) for op in p["stateOperators"] if op["operatorName"] == "suppress"]
    return {"rows": [[r.start, r.user, r["count"]] for r in rows],
            "emitted": sum(op["customMetrics"]["suppressionEmitTotal"] for op in ops),
            "suppressed": sum(op["customMetrics"]["intermediateResultSuppressionTotal"] for op in ops)}


def session_windows(spark: SparkSession, work: Path) -> dict[str, Any]:
    """A session-window count over Connect: in update mode (sluice's session updates), under
    suppress(until_window_closes), and in append mode (Spark's own), each into a memory sink."""
    # sum(1), not count(): the memory sink of Spark 4.1 and 4.2 fixes its schema when the query
    # starts, count() is non-nullable there, and a retraction's null does not fit (README, "Session
    # windows in update mode"); sum is nullable.
    counts = (events(spark, work / "session_in").withWatermark("ts", f"{WATERMARK_DELAY_S} seconds")
              .groupBy(F.session_window("ts", "5 seconds"), "user").agg(F.sum(F.lit(1)).alias("count")))
    out = {}
    for name, df, mode in (("updates", counts, "update"), ("finals", suppress(counts, UNBOUNDED), "update"),
                           ("append", counts, "append")):
        q = (df.writeStream.outputMode(mode).format("memory").queryName(f"sessions_{name}")
             .option("checkpointLocation", str(work / f"sessions_{name}_ckpt")).start())
        try:
            q.processAllAvailable()
        finally:
            q.stop()
        rows = spark.sql(f"SELECT user, CAST(session_window.start AS LONG) AS s, CAST(session_window.end AS LONG) AS e, "
                         f"count FROM sessions_{name}").collect()
        out[name] = [[r.user, r.s, r.e, r["count"]] for r in rows]
    return out


def misuse(spark: SparkSession, work: Path) -> dict[str, Any]:
    out = {}
    for name, call in misuse_cases(spark, work / "final_in").items():
        try:
            call()
            out[name] = None
        except Exception as e:
            out[name] = describe(e)
    return out


def output_mode(spark: SparkSession, work: Path) -> dict[str, Any] | None:
    final = suppress(windowed_counts(events(spark, work / "final_in")), UNBOUNDED)
    try:
        q = (final.writeStream.outputMode("append").format("memory").queryName("wrong_mode")
             .option("checkpointLocation", str(work / "mode_ckpt")).start())
        try:
            q.processAllAvailable()
        finally:
            q.stop()
    except Exception as e:
        return describe(e)
    return None


def commit_interval(spark: SparkSession, work: Path) -> dict[str, Any]:
    """A config-only feature: the emission cache, switched on by a session conf set over Connect."""
    spark.conf.set(COMMIT_INTERVAL_KEY, "1h")
    try:
        counts = (spark.readStream.schema("k string").option("maxFilesPerTrigger", 1)
                  .json(str(work / "interval_in")).groupBy("k").count())
        q = (counts.writeStream.outputMode("update").format("memory").queryName("held_counts")
             .option("checkpointLocation", str(work / "interval_ckpt")).start())
    finally:
        spark.conf.unset(COMMIT_INTERVAL_KEY)
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    ops = [op for p in progress(q) for op in p["stateOperators"] if op["operatorName"] == "emitCache"]
    return {"rows": len(spark.sql("SELECT * FROM held_counts").collect()),
            "absorbed": sum(op["customMetrics"]["emitCacheAbsorbedTotal"] for op in ops),
            "forwarded": sum(op["customMetrics"]["emitCacheForwardedTotal"] for op in ops)}


def jvm_helper(spark: SparkSession, work: Path) -> dict[str, Any] | None:
    from sluice._handles import jvm

    try:
        jvm(spark)
    except Exception as e:
        return describe(e)
    return None


def server_plugin(spark: SparkSession, work: Path) -> dict[str, Any]:
    """Whether the local server loaded sluice's Spark plugin: its executor part registered its
    metrics (read from the server's JVM, which runs in this process; the local executor shares the
    driver's metrics system)."""
    assert SparkContext._gateway is not None
    from support.metrics import PLUGIN_SOURCE, jmx_gauges
    return {"executors": len(jmx_gauges(SparkContext._gateway, PLUGIN_SOURCE))}


def malformed(spark: SparkSession, work: Path) -> dict[str, Any]:
    """A suppress message cut short, one of bytes that are no message (as a client with a damaged
    encoder would send), and sluice_suppress in SQL with a bad argument: each request fails, and the
    server goes on serving this session and a second one opened on it after the failures (a suppress
    analyzed, a query run)."""
    from sluice import _connect, _handles

    good = suppress(windowed_counts(events(spark, work / "final_in")), UNBOUNDED)
    relation = _handles.connect_plan(good)

    class Damaged(_connect._plan_class()):  # type: ignore[misc]
        def __init__(self, damage: Callable[[bytes], bytes]) -> None:
            super().__init__(relation._child, relation._fields)
            self._damage = damage

        def plan(self, session: Any) -> Any:
            rel = super().plan(session)
            rel.extension.value = self._damage(rel.extension.value)
            return rel

    out: dict[str, Any] = {}
    for name, damage in {"cut": lambda b: b[: len(b) // 2], "garbage": lambda b: b"\xff" * 16}.items():
        try:
            _handles.connect_dataframe(Damaged(damage), spark).schema  # noqa: B018 (analysis on the server)
            out[name] = None
        except Exception as e:
            out[name] = describe(e)
    # sluice_suppress in SQL with an unknown mode: the request fails when analyzed, as in a classic session
    windowed_counts(events(spark, work / "final_in")).createOrReplaceTempView("connect_counts")
    try:
        spark.sql("SELECT * FROM sluice_suppress(TABLE(connect_counts), 'until_later')").schema  # noqa: B018
        out["sql"] = None
    except Exception as e:
        out["sql"] = describe(e)
    other = SparkSession.builder.remote(f"sc://{spark.client._builder.endpoint}").create()  # type: ignore[attr-defined]
    try:
        out["other_session_differs"] = other.client._session_id != spark.client._session_id  # type: ignore[attr-defined]
        out["after"] = {
            "same_session_schema": good.schema.simpleString(),
            "other_session_schema": suppress(windowed_counts(events(other, work / "final_in")), UNBOUNDED)
            .schema.simpleString(),
            "other_session_rows": other.range(5).groupBy((F.col("id") % 2).alias("k")).count().count(),
        }
    finally:
        other.client.close()  # not stop(): on a local server that stops the server itself  # type: ignore[attr-defined]
    return out


def real_time_finals(spark: SparkSession, work: Path) -> dict[str, Any] | None:
    """suppress's final results under the real-time trigger (Spark 4.3) over Connect, from a Kafka
    topic this scenario fills, written per batch by an idempotent ForeachWriter; None without a
    broker (Spark 4.1 and 4.2 run no stateful real-time queries)."""
    if not (work / KAFKA_BOOTSTRAP).exists():
        return None
    from support.realtime_kill_child import EpochFiles, expected_finals, file_rows, produce_events, windowed_finals
    bootstrap = (work / KAFKA_BOOTSTRAP).read_text()
    kh.create_topic_in(SparkContext._jvm, bootstrap, "rt_events", 1)
    produce_events(spark, bootstrap, "rt_events", 0, 60)
    out = work / "rt_out"
    out.mkdir()
    # real-time mode runs all of a batch's tasks at once: one source and one shuffle partition on 2 slots
    spark.conf.set("spark.sql.shuffle.partitions", "1")
    try:
        q = (windowed_finals(spark, bootstrap, "rt_events").writeStream.foreach(EpochFiles(str(out)))
             .outputMode("update").option("checkpointLocation", str(work / "rt_ckpt"))
             .trigger(realTime="5 seconds").start())
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", SESSION_CONF["spark.sql.shuffle.partitions"])
    try:
        deadline = time.monotonic() + 120
        while not expected_finals(59) <= set(file_rows(out)):
            if not q.isActive or time.monotonic() > deadline:
                raise RuntimeError(f"real-time query stopped or stalled: {q.exception()}")
            time.sleep(0.2)
    finally:
        q.stop()
    return {"rows": sorted(list(r) for r in file_rows(out)),
            "expected": sorted(list(r) for r in expected_finals(59))}


SCENARIOS = [session_kind, final_results, misuse, output_mode, commit_interval, jvm_helper, server_plugin,
             session_windows, malformed, real_time_finals]


def ephemeral_connect_port(jars: list[str]) -> None:
    """Lets the local server bind an ephemeral port (tests may run side by side) instead of both
    sides using the fixed port 15002: with SPARK_TESTING set, pyspark binds port 0 and its client
    asks the in-process JVM for the port, as in pyspark's own tests. The JVM is launched first,
    without that variable, so that Spark itself does not run in its testing mode."""
    SparkContext._ensure_initialized(conf=SparkConf().set("spark.jars", ",".join([sluice.jar_path(), *jars])))
    os.environ["SPARK_TESTING"] = "1"


def main(work: Path) -> None:
    # With a broker (Spark 4.3, real_time_finals): the Kafka connector on the server's class path, and
    # tests/ on the Python workers' path (they load the ForeachWriter's class from it).
    kafka = (work / KAFKA_BOOTSTRAP).exists()
    if kafka:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the server's workers: this interpreter
    ephemeral_connect_port(kh.connector_jars() if kafka else [])
    builder = SparkSession.builder.remote("local[2]")
    for k, v in SESSION_CONF.items():
        builder = builder.config(k, v)
    spark = sluice.configure(builder).getOrCreate()
    results: dict[str, Any] = {}
    try:
        for scenario in SCENARIOS:
            start = time.monotonic()
            try:
                results[scenario.__name__] = {"ok": scenario(spark, work)}
            except Exception:
                results[scenario.__name__] = {"error": traceback.format_exc()}
            results[scenario.__name__]["seconds"] = round(time.monotonic() - start, 1)
    finally:
        tmp = work / "results.json.tmp"
        tmp.write_text(json.dumps(results))
        os.replace(tmp, work / "results.json")
        spark.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
