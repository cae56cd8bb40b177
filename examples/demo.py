"""sluice demo: a small streaming pipeline on local Spark with the sluice plugin.

Reads generated events (Spark's rate source), counts them per user in 10-second windows and prints
what each micro-batch emits, plus the record-cache budget the executor plugin assigned per task slot.
"""
from __future__ import annotations

import tempfile

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sluice
from sluice._jvm import executor_budgets


def main() -> None:
    builder = (SparkSession.builder.master("local[2]").appName("sluice-demo")
               .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false"))
    spark = sluice.configure(builder, statestore_cache_max_bytes="16m", commit_interval_ms="0").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")

    for executor, budget in executor_budgets(spark).items():
        print(f"executor {executor}: {budget['task_slots']} task slots, "
              f"{budget['cache_bytes_per_slot']} record-cache bytes per slot")

    events = (spark.readStream.format("rate").option("rowsPerSecond", 50).load()
              .withColumn("user", F.concat(F.lit("user-"), (F.col("value") % 3).cast("string"))))
    counts = (events.withWatermark("timestamp", "2 seconds")
              .groupBy(F.window("timestamp", "10 seconds"), "user").count())

    def show(batch, batch_id: int) -> None:
        rows = batch.orderBy("window", "user").collect()
        print(f"batch {batch_id}: {len(rows)} updated window counts")
        for r in rows:
            print(f"  {r.window.start:%H:%M:%S}-{r.window.end:%H:%M:%S} {r.user}: {r['count']}")

    with tempfile.TemporaryDirectory() as checkpoint:
        query = (counts.writeStream.outputMode("update").foreachBatch(show)
                 .option("checkpointLocation", checkpoint).trigger(processingTime="2 seconds").start())
        query.awaitTermination(12)
        query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
