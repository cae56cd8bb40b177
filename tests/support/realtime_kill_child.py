"""Child process of test_realtime's kill test: a real-time query with suppress's final results,
written through `EpochFiles`, runs until it is killed. Also the session, input, queries and sink the
real-time tests (test_realtime, test_realtime_composition) share.

argv: bootstrap servers, input topic, checkpoint, output folder, then any `key=value` session settings
and `--late=<folder>`: keep the late records there (parquet).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, for `support`

from pyspark import cloudpickle  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

import sluice  # noqa: E402
from support import kafka as kh  # noqa: E402
from support.session import parse_settings, sluice_session  # noqa: E402

WINDOW = "10 seconds"
# Real-time batches of 2 s (Spark's least is 5 s unless lowered): the tests wait for batch ends.
MIN_BATCH_KEY = "spark.sql.streaming.realTimeMode.minBatchDuration"
BATCH = "2 seconds"


def session(settings: dict[str, str] | None = None) -> SparkSession:
    """The session of the real-time tests: the Kafka connector on the driver's class path, one
    shuffle partition. A real-time batch runs all its tasks at once and is refused when the slots
    are not free: local[6] holds the README example's two queries (2 tasks each) with a read of
    their output beside them, and a slot to spare for a stopped query's tasks still ending."""
    jars = kh.connector_jars()
    kh.ensure_driver_jars(jars)
    return sluice_session("local[6]", conf={"spark.jars": ",".join(jars), "spark.sql.shuffle.partitions": "1",
                                            MIN_BATCH_KEY: "1s", **(settings or {})})


BASE = 1_700_000_000  # event times are whole seconds from here: deterministic windows


def produce_events(spark: SparkSession, bootstrap: str, topic: str, first: int, count: int,
                   partition: int = 0, prefix: str = "k") -> None:
    """Records first..first+count-1 in order into `partition`: key <prefix><i % 3>, event time BASE + i s."""
    (spark.range(first, first + count, numPartitions=1)
     .selectExpr(f"cast({partition} as int) as partition", f"cast(concat('{prefix}', pmod(id, 3)) as binary) as key",
                 f"cast(to_json(named_struct('ts', {BASE} + id)) as binary) as value")
     .write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save())


def all_counts(last: int, prefix: str = "k") -> dict[tuple[str, int], int]:
    """The count of every (key, window end) over records 0..last."""
    counts: dict[tuple[str, int], int] = {}
    for i in range(last + 1):
        end = BASE + (i // 10 + 1) * 10
        counts[(f"{prefix}{i % 3}", end)] = counts.get((f"{prefix}{i % 3}", end), 0) + 1
    return counts


def expected_finals(last: int, prefix: str = "k") -> set[tuple[str, int, int]]:
    """The final results of records 0..last: every (key, window) whose end is at or below the
    watermark (max event time - 2 s), with its count."""
    return {(k, end, n) for (k, end), n in all_counts(last, prefix).items() if end <= BASE + last - 2}


def epoch_texts(out: Path) -> dict[str, str]:
    """What each of `EpochFiles`' files in `out` holds, by file name. A running query may rerun a batch
    between the listing and the read: its file then moves to attempts/ and is left out here, the
    rerun's own file taking its place (the callers poll, so the next read has it)."""
    texts = {}
    for f in sorted(out.glob("*.jsonl")):
        try:
            texts[f.name] = f.read_text()
        except FileNotFoundError:
            pass
    return texts


def file_rows(out: Path) -> list[tuple[str, int, int]]:
    """The rows `EpochFiles` wrote into `out` (a line cut short by a kill left out)."""
    return [(d["key"], d["end"], d["count"]) for text in epoch_texts(out).values()
            for d in (json.loads(line) for line in text.splitlines() if line.endswith("}"))]


def later_batch_opened(out: Path) -> bool:
    """Whether some batch has written rows into `out`, and a batch after the last of them has opened
    its file: that one has ended, so a row it would still emit, one too many, is out."""
    texts = epoch_texts(out)
    written = [int(name[:5]) for name, text in texts.items() if text]
    return bool(written) and any(int(name[:5]) > max(written) for name in texts)


def events(spark: SparkSession, bootstrap: str, topic: str) -> DataFrame:
    """The records of `topic` as (key, ts): the key, and the event time in the JSON value `{"ts": <seconds>}`."""
    src = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", topic).option("startingOffsets", "earliest").load())
    return src.selectExpr("cast(key as string) key",
                          "timestamp_seconds(cast(get_json_object(cast(value as string), '$.ts') as long)) ts")


def windowed_counts(spark: SparkSession, bootstrap: str, topic: str) -> DataFrame:
    """Counts per key and 10-s window of `topic`'s events, watermark 2 s."""
    return events(spark, bootstrap, topic).withWatermark("ts", "2 seconds").groupBy(F.window("ts", WINDOW), "key").count()


def timed_counts(spark: SparkSession, bootstrap: str, topic: str) -> DataFrame:
    """Counts per key and 10-s window of `topic`'s events with their latest event time (until_time_limit's
    time_col), watermark 2 s."""
    return (events(spark, bootstrap, topic).withWatermark("ts", "2 seconds").groupBy(F.window("ts", WINDOW), "key")
            .agg(F.count("*").alias("count"), F.max("ts").alias("ts")))


def windowed_finals(spark: SparkSession, bootstrap: str, topic: str, late: str | None = None) -> DataFrame:
    final = sluice.Suppressed.until_window_closes(sluice.BufferConfig.unbounded())
    return sluice.suppress(windowed_counts(spark, bootstrap, topic),
                           final.with_late_records(late) if late else final)


class EpochFiles:
    """A ForeachWriter (a sink Spark's real-time mode allows) idempotent per batch: partition p's
    rows of batch (epoch) e go to <out>/<e>-<p>.jsonl, truncated when the batch opens it, so a batch
    rerun after a failure replaces what its failed attempt wrote. Flushed per row: what a killed
    attempt wrote stays visible."""

    def __init__(self, out: str) -> None:
        self.out = out

    def open(self, partition_id: int, epoch_id: int) -> bool:
        path = os.path.join(self.out, f"{epoch_id:05d}-{partition_id}.jsonl")
        if os.path.exists(path):  # what an earlier attempt wrote, kept for the soak's replay check
            attempts = os.path.join(self.out, "attempts")
            os.makedirs(attempts, exist_ok=True)
            os.replace(path, os.path.join(attempts, f"{epoch_id:05d}-{partition_id}-{len(os.listdir(attempts))}.jsonl"))
        self.file = open(path, "w")
        return True

    def process(self, row) -> None:
        self.file.write(json.dumps({"key": row.key, "end": int(row.window.end.timestamp()),
                                    "count": row["count"]}) + "\n")
        self.file.flush()

    def close(self, error) -> None:
        self.file.close()


def first_batch_committed(checkpoint: Path) -> bool:
    """Whether the query on `checkpoint` has committed its first batch. Kill tests wait for it: a real-time
    query killed before then leaves Spark's temporary offset-log file, on which Spark refuses to
    restart (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY; README, "Guarantee")."""
    return (checkpoint / "commits" / "0").exists()


def start_to_files(df: DataFrame, checkpoint: str, out: str):
    """Starts `df` (rows of key, window, count) under the real-time trigger, written through `EpochFiles` into `out`."""
    if __name__ != "__main__":
        # imported (by a test module): Spark's Python workers cannot import this file, so the writer
        # travels by value, as it does from the child's __main__
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return (df.writeStream.foreach(EpochFiles(out)).outputMode("update").option("checkpointLocation", checkpoint)
            .trigger(realTime=BATCH).start())


if __name__ == "__main__":
    bootstrap, topic, ckpt, out = sys.argv[1:5]
    late = next((a.split("=", 1)[1] for a in sys.argv[5:] if a.startswith("--late=")), None)
    spark = session(parse_settings(a for a in sys.argv[5:] if not a.startswith("--late=")))
    start_to_files(windowed_finals(spark, bootstrap, topic, late), ckpt, out).awaitTermination()
