"""Session windows in update mode, shared by their tests and the multi-executor ones: the query,
the table its changes build, Spark's append-mode result to compare it with, and a fixed input."""
from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from support.suppress import Run

GAP = "5 seconds"


def sessions(events: DataFrame, watermark: str = "10 seconds") -> DataFrame:
    return (events.withWatermark("ts", watermark)
            .groupBy(F.session_window("ts", GAP), "user")
            .agg(F.count("*").alias("n"), F.sum("v").alias("total")))


def key(r: dict) -> tuple:
    return (r["user"], r["session_window"]["start"].replace(tzinfo=None), r["session_window"]["end"].replace(tzinfo=None))


def is_retraction(r: dict) -> bool:
    return r["n"] is None and r["total"] is None


def apply(table: dict, rows: list[dict]) -> dict:
    """A downstream table keyed by (user, session window): a retraction deletes, a row upserts."""
    for r in rows:
        if is_retraction(r):
            assert key(r) in table, f"retraction of a session never emitted: {r}"
            del table[key(r)]
        else:
            table[key(r)] = (r["n"], r["total"])
    return table


def table_of(run: Run) -> dict:
    """The table the update-mode rows build, its sessions closed by the last watermark (the only ones
    append mode has emitted: max event time - 10 s, sessions ending at or before it)."""
    table: dict = {}
    for b in sorted(run.batches):
        apply(table, run.batches[b])
    events = [json.loads(line) for f in sorted(run.src.glob("*.json")) for line in f.read_text().splitlines()]
    watermark = max(datetime.strptime(e["ts"], "%Y-%m-%d %H:%M:%S.%f") for e in events) - timedelta(seconds=10)
    return {k: v for k, v in table.items() if k[2] <= watermark}


def append_mode_finals(spark: SparkSession, src: Path, tmp: Path) -> dict:
    """Spark's own session windows (append mode) over the same files, fed as the update-mode query
    was fed (one file, then every batch it leads to, watermark-only ones included): one final row
    per session."""
    feed = tmp / "append-in"
    feed.mkdir(parents=True)
    events = (spark.readStream.schema("ts timestamp, user string, v long").option("maxFilesPerTrigger", 1)
              .json(str(feed)))
    out: dict = {}

    def sink(batch: DataFrame, _: int) -> None:
        for r in batch.collect():
            r = r.asDict(recursive=True)
            assert key(r) not in out
            out[key(r)] = (r["n"], r["total"])

    q = (sessions(events).writeStream.outputMode("append").foreachBatch(sink)
         .option("checkpointLocation", str(tmp / "append-ckpt")).start())
    try:
        for f in sorted(src.glob("*.json")):
            shutil.copy(f, feed / f".{f.name}.tmp")
            (feed / f".{f.name}.tmp").rename(feed / f.name)
            q.processAllAvailable()
    finally:
        q.stop()
    return out


BATCHES = [
    [(0, "a"), (1, "a"), (3, "b")],          # a [0,6), b [3,8)
    [(10, "a", 2)],                          # a: new session [10,15); [0,6) unchanged, not emitted
    [(5.5, "a", 3)],                         # bridges a's [0,6) and [10,15): both retracted, [0,15) emitted
    [(12, "b")],                             # b: a second session
    [(60, "c")],                             # the watermark passes every earlier session
    [(120, "c")],
]


def feed_all(run: Run, batches: list) -> None:
    for b in batches:
        run.feed(*b)
