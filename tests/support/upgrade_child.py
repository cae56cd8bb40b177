"""Child process of test_spark_upgrade: runs every scenario's query once on its own checkpoint, under
the Spark of the virtualenv whose python runs it, over the input files present, and stops.

argv: a JSON file {"input": folder, "report": file, "scenarios": [{"name", "query", "options",
"checkpoint", "output"}]}. "options" are sluice.configure's options for the scenario; the settings
sluice.configure makes of them go into a session of the scenario's own (one SparkContext, one JVM,
for every scenario). "query" is one of QUERIES. Each micro-batch reads one file
(maxFilesPerTrigger=1); each batch's rows go to <output>/<batch id>.json, replaced atomically, so a
replayed batch overwrites its own file. The report: the running pyspark's version and, per scenario,
each batch's progress or the error the query failed with.
"""
from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, for `support`

import pyspark  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

import sluice  # noqa: E402
from sluice import BufferConfig, Suppressed, _handles, suppress  # noqa: E402
from sluice._conf import contract, spec  # noqa: E402
from support.session import TEST_CLASS_PATH_ENV, no_fork_local_fs, sluice_session  # noqa: E402
from support.sinks import batch_file_sink  # noqa: E402

WINDOW = "10 seconds"
DELAY = "5 seconds"
SESSION_GAP = "3 seconds"
# Queries run a few at a time: each waits on its own micro-batches part of the time.
WORKERS = 4


def counts(events: DataFrame) -> DataFrame:
    return events.groupBy(F.window("ts", WINDOW), "k").count()


QUERIES: dict[str, Callable[[DataFrame], DataFrame]] = {
    # update-mode count per 10 s window and key
    "count": counts,
    # until_window_closes, unbounded: fused into the aggregation (spark.sluice.suppress.fused's default)
    "fused": lambda e: suppress(counts(e), Suppressed.until_window_closes(BufferConfig.unbounded())),
    # until_window_closes in a buffer of one row per partition in memory, the rest spilled to disk
    "spilled": lambda e: suppress(counts(e), Suppressed.until_window_closes(
        BufferConfig.max_records(1).spill_to_disk_when_full())),
    # update-mode session windows: changes, a retraction as a null count
    "sessions": lambda e: e.groupBy(F.session_window("ts", SESSION_GAP), "k").count(),
}


def settings_of(options: dict[str, Any]) -> dict[str, str]:
    """The session settings sluice.configure sets for `options`: the provider and sluice's keys."""
    builder = sluice.configure(SparkSession.Builder(), **options)
    provider_key = contract()["provider_class_key"]
    return {k: str(v) for k, v in _handles.builder_options(builder).items()
            if k == provider_key or k.startswith(spec()["prefix"])}


def formatted(batch: DataFrame) -> DataFrame:
    """A batch's rows as strings of the session's time zone (UTC), whatever the Python process's."""
    window = "session_window" if "session_window" in batch.columns else "window"
    return batch.select(F.date_format(f"{window}.start", "yyyy-MM-dd HH:mm:ss").alias("start"),
                        F.date_format(f"{window}.end", "yyyy-MM-dd HH:mm:ss").alias("end"), "k", "count")


def run(spark: SparkSession, input_dir: str, scenario: dict[str, Any]) -> dict[str, Any]:
    session = spark.newSession()
    for k, v in settings_of(scenario["options"]).items():
        session.conf.set(k, v)
    events = (session.readStream.schema("ts TIMESTAMP, k STRING").option("maxFilesPerTrigger", 1)
              .json(input_dir).withWatermark("ts", DELAY))
    sink = batch_file_sink(scenario["output"], lambda r: [r.start, r.end, r.k, r["count"]])
    os.makedirs(scenario["output"], exist_ok=True)
    q = (QUERIES[scenario["query"]](events).writeStream.outputMode("update")
         .foreachBatch(lambda batch, batch_id: sink(formatted(batch), batch_id))
         .option("checkpointLocation", scenario["checkpoint"]).start())
    try:
        q.processAllAvailable()
    except Exception:
        return {"error": traceback.format_exc(), "progress": [json.loads(p.json) for p in q.recentProgress]}
    finally:
        q.stop()
    return {"progress": [json.loads(p.json) for p in q.recentProgress]}


def main(path: str) -> None:
    job = json.load(open(path))
    # the test class path compiled against this process's pyspark, not the parent's
    os.environ[TEST_CLASS_PATH_ENV] = no_fork_local_fs()
    spark = sluice_session()

    def one(scenario: dict[str, Any]) -> dict[str, Any]:
        try:
            return run(spark, job["input"], scenario)
        except Exception:
            return {"error": traceback.format_exc(), "progress": []}

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        results = dict(zip([s["name"] for s in job["scenarios"]], pool.map(one, job["scenarios"]), strict=True))
    spark.stop()
    with open(job["report"] + ".tmp", "w") as f:
        json.dump({"pyspark": pyspark.__version__, "scenarios": results}, f)
    os.replace(job["report"] + ".tmp", job["report"])


if __name__ == "__main__":
    main(sys.argv[1])
