"""Child process of test_sessions' kill test: runs a session-window query until it is killed.

argv: input folder, checkpoint, output folder, state store provider class, "updates" or "finals".
Each batch's rows go to <output>/<batch id>.json, replaced atomically (an idempotent sink keyed by
batch id).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, for `support`

from pyspark.sql import functions as F  # noqa: E402

from sluice import BufferConfig, Suppressed, suppress  # noqa: E402
from support.session import sluice_session  # noqa: E402
from support.sinks import batch_file_sink  # noqa: E402


def session_query(spark, src, mode):
    events = spark.readStream.schema("ts timestamp, user string, v long").option("maxFilesPerTrigger", 1).json(src)
    counts = (events.withWatermark("ts", "10 seconds").groupBy(F.session_window("ts", "5 seconds"), "user")
              .agg(F.count("*").alias("n"), F.sum("v").alias("total")))
    return counts if mode == "updates" else suppress(counts, Suppressed.until_window_closes(BufferConfig.unbounded()))


def file_sink(out):
    return batch_file_sink(out, lambda r: {"user": r.user, "start": r.session_window.start.isoformat(),
                                           "end": r.session_window.end.isoformat(), "n": r.n, "total": r.total})


if __name__ == "__main__":
    src, ckpt, out, provider, mode = sys.argv[1:6]
    spark = sluice_session(conf={"spark.sql.streaming.stateStore.providerClass": provider})
    q = (session_query(spark, src, mode).writeStream.outputMode("update").foreachBatch(file_sink(out))
         .option("checkpointLocation", ckpt).start())
    q.awaitTermination()
