"""Child process of test_late_records' kill test: runs a final-results query that keeps its late
records until it is killed.

argv: input folder, checkpoint, output folder, late-records folder, state store provider class.
Each batch's rows go to <output>/<batch id>.json, replaced atomically (an idempotent sink keyed by
batch id); late records go to the late-records folder as parquet.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, for `support`

from pyspark.sql import functions as F  # noqa: E402

from sluice import BufferConfig, Suppressed, suppress  # noqa: E402
from support.session import sluice_session  # noqa: E402
from support.suppress_kill_child import file_sink  # noqa: E402  (the same rows, read by support.sinks.emitted_finals)


def final_results(spark, src, late):
    events = spark.readStream.schema("ts timestamp, user string, v long").option("maxFilesPerTrigger", 1).json(src)
    counts = events.withWatermark("ts", "10 minutes").groupBy(F.window("ts", "1 hour"), "user").count()
    return suppress(counts, Suppressed.until_window_closes(BufferConfig.unbounded()).with_late_records(late))


if __name__ == "__main__":
    src, ckpt, out, late, provider = sys.argv[1:6]
    spark = sluice_session(conf={"spark.sql.streaming.stateStore.providerClass": provider})
    q = (final_results(spark, src, late).writeStream.outputMode("update").foreachBatch(file_sink(out))
         .option("checkpointLocation", ckpt).start())
    q.awaitTermination()
