"""Run by test_stop.py: for each provider given, stops two stateful queries while a batch runs
(both tasks' shuffle partitions hold keys, the stop comes once a task is inside a slow UDF after
the aggregation): one writing to a sink, one whose foreachBatch function runs the batch as a job.
Everything the JVM logs goes to this process's stderr; `=== <provider> <shape> ===` lines
(flushed before and after each run, once no task is left) delimit each run's output."""
import json
import os
import sys
import time
from pathlib import Path

from pyspark.sql import functions as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for `support`, when run as a script
import sluice
from support.session import BASE_CONF, fresh_builder  # noqa: E402

PROVIDERS = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "window": "sluice.windowstore.InMemoryWindowStoreProvider",
}

work = Path(sys.argv[1])
os.environ["PYSPARK_PYTHON"] = sys.executable
builder = fresh_builder().master("local[2]").appName("sluice-stop")
for k, v in BASE_CONF.items():
    builder = builder.config(k, v)
spark = sluice.configure(builder).getOrCreate()
spark.sparkContext.setLogLevel("WARN")
scheduler = spark.sparkContext._jsc.sc().taskScheduler()


def running_tasks() -> int:
    """Tasks the scheduler has not heard the end of: a killed task counts until its executor
    reports it, after its cleanup (and what that logs), unlike a cancelled stage, which ends at once."""
    counts = scheduler.runningTasksByExecutors().valuesIterator()
    total = 0
    while counts.hasNext():
        total += counts.next()
    return total


def mark(text: str) -> None:
    sys.stdout.flush()
    print(f"=== {text} ===", file=sys.stderr, flush=True)


def wait_for(cond, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


for name in sys.argv[2].split(","):
    for shape in ("sink", "foreach_batch"):
        run = work / f"{name}-{shape}"
        (run / "in").mkdir(parents=True)
        (run / "udf").mkdir()
        # k0..k5 land in both of the 2 shuffle partitions
        (run / "in" / "a.json").write_text("".join(json.dumps({"k": f"k{i % 6}"}) + "\n" for i in range(24)))
        udf_dir = str(run / "udf")

        @F.udf("long")
        def slow(n):
            import os
            import time
            import uuid
            open(os.path.join(udf_dir, uuid.uuid4().hex), "w").close()
            time.sleep(600)  # ended by the task kill of the stop
            return n

        spark.conf.set("spark.sql.streaming.stateStore.providerClass", PROVIDERS[name])
        counts = (spark.readStream.schema("k string").json(str(run / "in")).groupBy("k").count()
                  .select("k", slow("count").alias("n")))
        writer = counts.writeStream.outputMode("update").option("checkpointLocation", str(run / "ckpt"))
        writer = writer.format("noop") if shape == "sink" else writer.foreachBatch(lambda df, _: df.collect())
        mark(f"{name} {shape}")
        query = writer.start()
        wait_for(lambda: any((run / "udf").iterdir()), "no task reached the UDF")
        query.stop()
        wait_for(lambda: running_tasks() == 0, "tasks still running after stop")
        exc = query.exception()
        print("RESULT " + json.dumps({"provider": name, "shape": shape,
                                      "exception": None if exc is None else str(exc)[:500]}), flush=True)
        mark(f"{name} {shape} end")
spark.stop()
