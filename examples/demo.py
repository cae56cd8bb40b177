"""sluice demo: a small streaming pipeline on local Spark with the sluice plugin.

Prints the record-cache budget the executor plugin assigned per task slot, then counts events per
user in 10-second windows over a fixed set of event files (one micro-batch each), first as Spark's
update-mode stream of intermediate counts, then with suppress(until_window_closes) (KIP-328): one
final count per window and user, emitted once the watermark passes the window end.
"""
from __future__ import annotations

import json
import os
import tempfile

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sluice
from sluice import BufferConfig, Suppressed, suppress
from sluice._jvm import executor_budgets


def main() -> None:
    builder = (SparkSession.builder.master("local[2]").appName("sluice-demo")
               .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false"))
    spark = sluice.configure(builder, statestore_cache_max_bytes="16m", commit_interval_ms="0").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")

    for executor, budget in executor_budgets(spark).items():
        print(f"executor {executor}: {budget['task_slots']} task slots, "
              f"{budget['cache_bytes_per_slot']} record-cache bytes per slot")

    suppress_demo(spark)
    spark.stop()


def suppress_demo(spark: SparkSession) -> None:
    """Intermediate vs final window counts over the same four input files (one micro-batch each)."""
    with tempfile.TemporaryDirectory() as work:
        os.makedirs(f"{work}/in")
        # Event seconds per batch; the last one moves the watermark past the first two windows.
        batches = [[1, 3, 4], [6, 8, 12], [9, 15, 18], [31]]
        for i, seconds in enumerate(batches):
            with open(f"{work}/in/{i}.json", "w") as f:
                for n, s in enumerate(seconds):
                    f.write(json.dumps({"ts": f"2024-01-01 00:00:{s:02d}", "user": f"user-{n % 2}"}) + "\n")
            os.utime(f"{work}/in/{i}.json", (1_700_000_000 + i, 1_700_000_000 + i))  # file order = batch order
        events = (spark.readStream.schema("ts timestamp, user string").option("maxFilesPerTrigger", 1)
                  .json(f"{work}/in"))
        counts = events.withWatermark("ts", "2 seconds").groupBy(F.window("ts", "10 seconds"), "user").count()
        final = suppress(counts, Suppressed.until_window_closes(BufferConfig.unbounded()))
        for label, df in (("update mode, no suppress", counts), ("suppress(until_window_closes)", final)):
            print(f"\n{label}:")

            def show(batch, batch_id: int) -> None:
                for r in batch.orderBy("window", "user").collect():
                    print(f"  batch {batch_id}: {r.window.start:%H:%M:%S}-{r.window.end:%H:%M:%S} "
                          f"{r.user}: {r['count']}")

            query = (df.writeStream.outputMode("update").foreachBatch(show)
                     .option("checkpointLocation", f"{work}/ckpt-{len(label)}").start())
            query.processAllAvailable()
            query.stop()


if __name__ == "__main__":
    main()
