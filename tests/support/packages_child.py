"""Run by test_install.py through `spark-submit --packages io.sluice:sluice_2.13:...`: plain
pyspark, no sluice Python package; sluice's classes come only from the resolved Maven artifact,
enabled by the --conf keys of the command line. Prints one JSON line with what the test checks."""
import json
import sys

from pyspark.sql import SparkSession

src, checkpoint = sys.argv[1], sys.argv[2]
spark = SparkSession.builder.getOrCreate()
query = (spark.readStream.schema("k string").json(src).groupBy("k").count()
         .writeStream.outputMode("update").format("memory").queryName("counts")
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
query.awaitTermination()
ops = [p["stateOperators"][0] for p in query.recentProgress if p["stateOperators"]]
print("RESULT " + json.dumps({
    "counts": {r["k"]: r["count"] for r in spark.table("counts").collect()},
    "provider": spark.conf.get("spark.sql.streaming.stateStore.providerClass"),
    "metrics": sorted(ops[0]["customMetrics"]) if ops else [],
}))
spark.stop()
