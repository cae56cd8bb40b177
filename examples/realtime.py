"""sluice under Spark 4.3's real-time trigger: the README's example (see "Real-time mode").

Clicks arrive on a Kafka topic (key: the user; value: JSON with the click's event time in epoch
seconds, `{"ts": 1700000000}`). Two queries count them per user in 10-second windows:

- ``finals``: ``suppress(until_window_closes)``: one final count per window and user, sent
  milliseconds after the click that moves the partition's event time past the window's end + 2 s;
- ``updates``: the running count, forwarded at most once per 100 ms per key by the emission cache
  (``spark.sluice.commit.interval.ms``), Kafka Streams' record cache in front of downstream.

    python examples/realtime.py --bootstrap localhost:9092 --input clicks --checkpoints /tmp/rt

(topics ``click-finals`` and ``click-updates`` must exist). ``tests/realtime/test_realtime.py`` runs it.
"""
from __future__ import annotations

import argparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

import sluice
from sluice import BufferConfig, Suppressed


def clicks(spark: SparkSession, bootstrap: str, topic: str) -> DataFrame:
    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest").load()
            .selectExpr("cast(key as string) user",
                        "timestamp_seconds(cast(get_json_object(cast(value as string), '$.ts') as long)) ts"))


def counts(clicks: DataFrame) -> DataFrame:
    return clicks.withWatermark("ts", "2 seconds").groupBy(F.window("ts", "10 seconds"), "user").count()


def to_kafka(df: DataFrame, bootstrap: str, topic: str, checkpoint: str) -> StreamingQuery:
    return (df.selectExpr("user as key", "to_json(struct(user, cast(window.end as long) as end, count)) as value")
            .writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
            .option("checkpointLocation", checkpoint).outputMode("update")
            .trigger(realTime="5 seconds")  # the only change from a micro-batch query
            .start())


def start(spark: SparkSession, bootstrap: str, topic: str, checkpoints: str) -> tuple[StreamingQuery, StreamingQuery]:
    finals = sluice.suppress(counts(clicks(spark, bootstrap, topic)),
                             Suppressed.until_window_closes(BufferConfig.unbounded()))
    finals_query = to_kafka(finals, bootstrap, "click-finals", f"{checkpoints}/finals")
    # A query takes the session's settings when it starts: this one alone gets the interval.
    spark.conf.set("spark.sluice.commit.interval.ms", "100")
    try:
        updates_query = to_kafka(counts(clicks(spark, bootstrap, topic)), bootstrap, "click-updates",
                                 f"{checkpoints}/updates")
    finally:
        spark.conf.unset("spark.sluice.commit.interval.ms")
    return finals_query, updates_query


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", default="clicks")
    ap.add_argument("--checkpoints", required=True)
    a = ap.parse_args()
    # the Kafka connector on the class path, e.g. spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0
    spark = sluice.configure(SparkSession.builder.appName("sluice-realtime")).getOrCreate()
    for q in start(spark, a.bootstrap, a.input, a.checkpoints):
        print(f"started {q.name or q.id}")
    spark.streams.awaitAnyTermination()
