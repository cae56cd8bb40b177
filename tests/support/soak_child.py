"""Child process of the crash soak (tests/support/crash_soak.py): one final-results pipeline (windowed
count + suppress until_window_closes) per record-cache delegate, all in this one driver (a kill
stops each in a different phase of its batch), with a commit interval set, each writing through an
idempotent foreachBatch sink.

argv: input folder, checkpoint root, output root, delegates (comma-separated: hdfs, rocksdb,
in_memory_window), mode (`run`: until killed; `drain`: until all input is processed, then exit 0),
kind (`windows`, the default, or `sessions`: per delegate the update-mode session count of
tests/support/session_kill_child.py, every change and under suppress until_window_closes), then any
`key=value` session settings (e.g. spark.sluice.json.decoder=sluice). Each pipeline
p of crash_soak.pipelines uses <checkpoint root>/p and <output root>/p.

The sink writes each batch's rows to <output>/batch-<id>.json, replaced atomically (temp file +
rename), so a replayed batch overwrites its own file. Before that it keeps a copy of every attempt
as <output>/attempts/batch-<id>-attempt-<n>.json, so the parent can compare a replay with the
first run of the same batch id.
"""
from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, for `support`

from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from sluice import BufferConfig, Suppressed, suppress  # noqa: E402
from support.crash_soak import pipelines  # noqa: E402
from support.session import parse_settings, sluice_session  # noqa: E402
from support.session_kill_child import session_query  # noqa: E402

WINDOW = "10 seconds"
DELAY = "5 seconds"
CACHE_BYTES = 4096  # small, so the record cache evicts to its delegate in the middle of batches
INTERVAL = "30s"  # the cluster-wide commit interval of issue 11, longer than any batch here
# Session pipelines in update mode get the emission cache above the session update (keyed by
# (user, session)): with a few seconds it holds rows across several batches and kills, and the
# drain waits that long, not 30 s, for the last held rows.
SESSION_INTERVAL = "3s"


def final_results(spark: SparkSession, src: str) -> DataFrame:
    events = (spark.readStream.schema("ts timestamp, user string").option("maxFilesPerTrigger", 1)
              .json(src).withWatermark("ts", DELAY))
    counts = events.groupBy(F.window("ts", WINDOW), "user").count()
    return suppress(counts, Suppressed.until_window_closes(BufferConfig.unbounded()))


def write_atomically(path: str, text: str) -> None:
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def window_rows(batch: DataFrame) -> list[list]:
    return [[r.start, r.user, r["count"]] for r in
            batch.selectExpr("CAST(window.start AS STRING) AS start", "user", "count").collect()]


def session_rows(batch: DataFrame) -> list[list]:
    """[start, end, user, n]: n is null in a retraction."""
    return [[r.start, r.end, r.user, r.n] for r in batch.selectExpr(
        "CAST(session_window.start AS STRING) AS start", "CAST(session_window.end AS STRING) AS end", "user",
        "n").collect()]


def sink(out: str, rows_of=window_rows):
    attempts = os.path.join(out, "attempts")
    os.makedirs(attempts, exist_ok=True)

    def write(batch: DataFrame, batch_id: int) -> None:
        text = json.dumps(sorted(rows_of(batch), key=json.dumps))
        n = sum(1 for f in os.listdir(attempts) if f.startswith(f"batch-{batch_id:05d}-attempt-"))
        write_atomically(os.path.join(attempts, f"batch-{batch_id:05d}-attempt-{n}.json"), text)
        write_atomically(os.path.join(out, f"batch-{batch_id:05d}.json"), text)
    return write


def holds_rows(query) -> bool:
    """Whether the query's emission cache still held rows after its last batch."""
    p = query.lastProgress
    return p is None or any(op["operatorName"] == "emitCache" and op["numRowsTotal"] > 0 for op in p["stateOperators"])


if __name__ == "__main__":
    src, ckpt, out, delegates, mode = sys.argv[1:6]
    kind = sys.argv[6] if len(sys.argv) > 6 else "windows"
    spark = sluice_session(conf=parse_settings(sys.argv[7:]), state_store_cache=True,
                           statestore_cache_max_bytes=CACHE_BYTES, commit_interval_ms=INTERVAL)
    queries = []
    for p in pipelines(kind, delegates.split(",")):
        session = spark.newSession()  # own SQL conf: the delegate is read when the query's stores load
        session.conf.set("spark.sluice.statestore.cache.delegate", p.split(".")[0])
        if kind == "windows":
            df, rows_of = final_results(session, src), window_rows
        else:
            session.conf.set("spark.sluice.commit.interval.ms", SESSION_INTERVAL)
            df, rows_of = session_query(session, src, p.split(".")[1]), session_rows
        queries.append(df.writeStream.outputMode("update").foreachBatch(sink(os.path.join(out, p), rows_of))
                       .option("checkpointLocation", os.path.join(ckpt, p)).start())
    if mode == "drain":
        for q in queries:
            q.processAllAvailable()
            # rows an emission cache still holds leave in the batch without input Spark runs when
            # they are due (within SESSION_INTERVAL); awaitTermination returns early if the query
            # fails. Bounded: a cache still holding rows then shows as lost rows in the parent's check.
            deadline = time.monotonic() + 60
            while holds_rows(q) and time.monotonic() < deadline and not q.awaitTermination(0.2):
                pass
        for q in queries:
            q.stop()
    else:
        spark.streams.awaitAnyTermination()
