"""Child process of test_cache_emit's kill test: an aggregation on the caching provider with a long
commit interval, run until it is killed.

argv: input folder, checkpoint, output folder. Each batch's rows go to <output>/<batch id>.json,
replaced atomically (an idempotent sink keyed by batch id).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pyspark.sql import functions as F  # noqa: E402

from conftest import batch_file_sink, sluice_session  # noqa: E402


def counts(spark, src):
    return (spark.readStream.schema("k STRING, v LONG").option("maxFilesPerTrigger", 1).json(src)
            .groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s")))


def file_sink(out):
    return batch_file_sink(out, lambda r: [r.k, r.n, r.s])


if __name__ == "__main__":
    src, ckpt, out = sys.argv[1:4]
    spark = sluice_session(conf={"spark.sluice.commit.interval.ms": "1h"}, state_store_cache=True)
    q = (counts(spark, src).writeStream.outputMode("update").foreachBatch(file_sink(out))
         .option("checkpointLocation", ckpt).start())
    q.awaitTermination()
