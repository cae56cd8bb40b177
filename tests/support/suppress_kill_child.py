"""Child process of test_suppress_kill: runs a final-results query until it is killed.

argv: input folder, checkpoint, output folder, state store provider class[, slide (may be empty)[,
key=value ...]].
Each batch's rows go to <output>/<batch id>.json, replaced atomically (an idempotent sink keyed by
batch id). With a slide the hour-long windows slide by it; each key=value after it is a further
session setting.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, for `support`

from pyspark.sql import functions as F  # noqa: E402

from sluice import BufferConfig, Suppressed, suppress  # noqa: E402
from support.session import parse_settings, sluice_session  # noqa: E402
from support.sinks import batch_file_sink  # noqa: E402

def final_results(spark, src, slide=None):
    events = spark.readStream.schema("ts timestamp, user string, v long").option("maxFilesPerTrigger", 1).json(src)
    counts = events.withWatermark("ts", "10 minutes").groupBy(F.window("ts", "1 hour", slide), "user").count()
    return suppress(counts, Suppressed.until_window_closes(BufferConfig.unbounded()))


def file_sink(out):
    return batch_file_sink(out, lambda r: {"start": r.window.start.isoformat(), "user": r.user, "count": r["count"]})


if __name__ == "__main__":
    src, ckpt, out, provider = sys.argv[1:5]
    slide = (sys.argv[5] if len(sys.argv) > 5 else "") or None
    settings = parse_settings(sys.argv[6:])
    spark = sluice_session(conf={"spark.sql.streaming.stateStore.providerClass": provider, **settings})
    q = (final_results(spark, src, slide).writeStream.outputMode("update").foreachBatch(file_sink(out))
         .option("checkpointLocation", ckpt).start())
    q.awaitTermination()
