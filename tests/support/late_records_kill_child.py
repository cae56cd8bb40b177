"""Child process of test_late_records' kill test: runs a final-results query that keeps its late
records until it is killed.

argv: input folder, checkpoint, output folder, late-records folder, state store provider class,
and optionally the query: "windows" (hourly windows closed at the watermark, the default) or
"sessions" (20-minute session windows with a grace of 2 minutes below a 4-hour watermark delay).
Each batch's rows go to <output>/<batch id>.json, replaced atomically (an idempotent sink keyed by
batch id); late records go to the late-records folder as parquet.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, for `support`

from datetime import timedelta  # noqa: E402

from pyspark.sql import functions as F  # noqa: E402

from sluice import BufferConfig, Suppressed, suppress  # noqa: E402
from support.session import sluice_session  # noqa: E402
from support.sinks import batch_file_sink  # noqa: E402
from support.suppress_kill_child import file_sink  # noqa: E402  (the same rows, read by support.sinks.emitted_finals)


def final_results(spark, src, late, query="windows"):
    events = spark.readStream.schema("ts timestamp, user string, v long").option("maxFilesPerTrigger", 1).json(src)
    if query == "sessions":
        counts = events.withWatermark("ts", "4 hours").groupBy(F.session_window("ts", "20 minutes"), "user").count()
        final = Suppressed.until_window_closes(BufferConfig.unbounded(), grace=timedelta(minutes=2))
    else:
        counts = events.withWatermark("ts", "10 minutes").groupBy(F.window("ts", "1 hour"), "user").count()
        final = Suppressed.until_window_closes(BufferConfig.unbounded())
    return suppress(counts, final.with_late_records(late))


def sink(out, query="windows"):
    """The (start, user, count) rows support.sinks.emitted_finals reads, of a window or a session."""
    if query == "sessions":
        return batch_file_sink(out, lambda r: {"start": r.session_window.start.isoformat(), "user": r.user,
                                               "count": r["count"]})
    return file_sink(out)


if __name__ == "__main__":
    src, ckpt, out, late, provider = sys.argv[1:6]
    query = sys.argv[6] if len(sys.argv) > 6 else "windows"
    spark = sluice_session(conf={"spark.sql.streaming.stateStore.providerClass": provider})
    q = (final_results(spark, src, late, query).writeStream.outputMode("update").foreachBatch(sink(out, query))
         .option("checkpointLocation", ckpt).start())
    q.awaitTermination()
