"""Child process of test_late_records_delta: one run of both queries, in a JVM started with Delta's jar
(`--packages`, resolved from Maven Central when the JVM starts, which is why this is a process of its
own: the test's JVM may already be running). The keeping query (checkpoint <root>/ckpt) reads
the run's events from files in <root>/in, one file per micro-batch (availableNow); the late stream, on its own checkpoint <root>/late-ckpt, is
written to the Delta table <root>/table with availableNow triggers, once before the events (a restart
delivers nothing already in the table) and once after.

argv: root folder, Delta's Maven coordinate, run (1 or 2). Prints one JSON line: the table's rows and
the kept records (read as a batch), each as [batch_id, window start, user, event time, late_by_ms].
"""
from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime, timedelta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, for `support`

root, package, run = sys.argv[1], sys.argv[2], sys.argv[3]
# Read by pyspark when it starts the JVM (support.session starts it on the first session).
os.environ["PYSPARK_SUBMIT_ARGS"] = f"--packages {package} pyspark-shell"

from pyspark.sql import functions as F  # noqa: E402

from sluice import BufferConfig, Suppressed, late_records, suppress  # noqa: E402
from support.session import sluice_session  # noqa: E402

T0 = datetime(2024, 1, 1)
# A batch judges lateness by the watermark of the batch before it, which holds the event times of the
# batches before that: each late file comes two files after the one that closes its window.
EVENTS = {"1": [[(10, "a"), (20, "b"), (40, "a")], [(95, "a")], [(96, "z")], [(50, "a"), (55, "c")]],
          "2": [[(151, "c")], [(152, "c")], [(70, "d")], [(800, "e")]]}


def keep_late_records(spark) -> None:
    """Feeds the run's events, a file per micro-batch, to the query keeping its late records."""
    src = f"{root}/in"
    os.makedirs(src, exist_ok=True)
    first = len(os.listdir(src))
    now = time.time()
    for i, batch in enumerate(EVENTS[run]):
        path = f"{src}/{first + i:05d}.json"
        with open(path, "w") as f:
            for s, u in batch:
                f.write(json.dumps({"ts": str(T0 + timedelta(seconds=s)), "user": u}) + "\n")
        # The file source takes files in modification time order: a second apart, not in one tick.
        os.utime(path, (now + i, now + i))
    events = spark.readStream.schema("ts timestamp, user string").option("maxFilesPerTrigger", 1).json(src)
    counts = events.withWatermark("ts", "10 minutes").groupBy(F.window("ts", "1 minute"), "user").count()
    late = Suppressed.until_window_closes(BufferConfig.unbounded(), grace=timedelta(seconds=30))
    q = (suppress(counts, late.with_late_records(f"{root}/late")).writeStream.outputMode("update").format("noop")
         .option("checkpointLocation", f"{root}/ckpt").trigger(availableNow=True).start())
    q.awaitTermination()


def to_delta(spark) -> None:
    q = (late_records(spark, f"{root}/late", f"{root}/ckpt").writeStream.format("delta")
         .option("checkpointLocation", f"{root}/late-ckpt").trigger(availableNow=True).start(f"{root}/table"))
    q.awaitTermination()


def rows(df) -> list:
    return sorted([r.batch_id, str(r.window.start), r.user, str(r.ts), r.late_by_ms] for r in df.collect())


spark = sluice_session(conf={"spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
                             "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog"})
before = []
if run != "1":
    to_delta(spark)
    before = rows(spark.read.format("delta").load(f"{root}/table"))
keep_late_records(spark)
to_delta(spark)
print("RESULT " + json.dumps({"before": before, "table": rows(spark.read.format("delta").load(f"{root}/table")),
                              "kept": rows(spark.read.parquet(f"{root}/late"))}))
spark.stop()
