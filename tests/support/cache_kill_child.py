"""Child process of the cache kill tests: a query on the caching provider with a long commit
interval, run until it is killed.

argv: input folder, checkpoint, output folder[, delegate, "windowed"]. Each batch's rows go to
<output>/<batch id>.json, replaced atomically (an idempotent sink keyed by batch id). The default
query is an update-mode count per key (test_cache_emit); "windowed" is an append-mode windowed
count over {"k", "v", "ts"} rows with a 10 s watermark (test_cache_writebehind).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, for `support`

from pyspark.sql import functions as F  # noqa: E402

from support.session import sluice_session  # noqa: E402
from support.sinks import batch_file_sink  # noqa: E402


def counts(spark, src):
    return (spark.readStream.schema("k STRING, v LONG").option("maxFilesPerTrigger", 1).json(src)
            .groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s")))


def file_sink(out):
    return batch_file_sink(out, lambda r: [r.k, r.n, r.s])


def windowed(spark, src):
    return (spark.readStream.schema("k STRING, v LONG, ts TIMESTAMP").option("maxFilesPerTrigger", 1).json(src)
            .withWatermark("ts", "10 seconds").groupBy(F.window("ts", "10 seconds"), "k")
            .agg(F.count("*").alias("n"), F.sum("v").alias("s"))
            .select(F.date_format("window.start", "yyyy-MM-dd HH:mm:ss").alias("w"), "k", "n", "s"))


def windowed_sink(out):
    return batch_file_sink(out, lambda r: [r.w, r.k, r.n, r.s])


if __name__ == "__main__":
    src, ckpt, out = sys.argv[1:4]
    delegate = sys.argv[4] if len(sys.argv) > 4 else None
    kind = sys.argv[5] if len(sys.argv) > 5 else "counts"
    conf = {"spark.sluice.commit.interval.ms": "1h"}
    if delegate:
        conf["spark.sluice.statestore.cache.delegate"] = delegate
    spark = sluice_session(conf=conf, state_store_cache=True)
    if kind == "windowed":
        q = (windowed(spark, src).writeStream.outputMode("append").foreachBatch(windowed_sink(out))
             .option("checkpointLocation", ckpt).start())
    else:
        q = (counts(spark, src).writeStream.outputMode("update").foreachBatch(file_sink(out))
             .option("checkpointLocation", ckpt).start())
    q.awaitTermination()
