"""Child process of the crash soak (tests/crash_soak.py): one final-results pipeline (windowed
count + suppress until_window_closes) per record-cache delegate, all in this one driver (a kill
stops each in a different phase of its batch), with a commit interval set, each writing through an
idempotent foreachBatch sink.

argv: input folder, checkpoint root, output root, delegates (comma-separated: hdfs, rocksdb,
in_memory_window), mode (`run`: until killed; `drain`: until all input is processed, then exit 0).
Delegate d uses <checkpoint root>/d and <output root>/d.

The sink writes each batch's rows to <output>/batch-<id>.json, replaced atomically (temp file +
rename), so a replayed batch overwrites its own file. Before that it keeps a copy of every attempt
as <output>/attempts/batch-<id>-attempt-<n>.json, so the parent can compare a replay with the
first run of the same batch id.
"""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from conftest import sluice_session  # noqa: E402
from sluice import BufferConfig, Suppressed, suppress  # noqa: E402

WINDOW = "10 seconds"
DELAY = "5 seconds"
CACHE_BYTES = 4096  # small, so the record cache evicts to its delegate in the middle of batches
INTERVAL = "30s"  # the cluster-wide commit interval of issue 11, longer than any batch here


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


def sink(out: str):
    attempts = os.path.join(out, "attempts")
    os.makedirs(attempts, exist_ok=True)

    def write(batch: DataFrame, batch_id: int) -> None:
        rows = sorted([r.start, r.user, r["count"]] for r in
                      batch.selectExpr("CAST(window.start AS STRING) AS start", "user", "count").collect())
        text = json.dumps(rows)
        n = sum(1 for f in os.listdir(attempts) if f.startswith(f"batch-{batch_id:05d}-attempt-"))
        write_atomically(os.path.join(attempts, f"batch-{batch_id:05d}-attempt-{n}.json"), text)
        write_atomically(os.path.join(out, f"batch-{batch_id:05d}.json"), text)
    return write


if __name__ == "__main__":
    src, ckpt, out, delegates, mode = sys.argv[1:6]
    spark = sluice_session(state_store_cache=True, statestore_cache_max_bytes=CACHE_BYTES,
                           commit_interval_ms=INTERVAL)
    queries = []
    for d in delegates.split(","):
        session = spark.newSession()  # own SQL conf: the delegate is read when the query's stores load
        session.conf.set("spark.sluice.statestore.cache.delegate", d)
        queries.append(final_results(session, src).writeStream.outputMode("update")
                       .foreachBatch(sink(os.path.join(out, d)))
                       .option("checkpointLocation", os.path.join(ckpt, d)).start())
    if mode == "drain":
        for q in queries:
            q.processAllAvailable()
        for q in queries:
            q.stop()
    else:
        spark.streams.awaitAnyTermination()
