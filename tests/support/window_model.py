"""Windowed input and its model, for the experimental rewrites' tests (Kafka records read directly):
the input, one JSON file per micro-batch (maxFilesPerTrigger=1), each batch's rows recorded by batch
id; and a small model of sliding (or tumbling) windows and the watermark the final results are checked
against."""
from __future__ import annotations

import json
import math
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Optional

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sluice import BufferConfig, Suppressed, suppress

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
DELAY = 10  # watermark delay, seconds
SIZE = 60   # window size, seconds
SLIDE = 20

# Events (seconds after T0, user, v) per micro-batch: several per slice and user, out of order, late
# events for windows already closed, negative values (so max and sum are not the count's shape).
BATCHES = [
    [(5, "a", 3), (50, "b", -2), (20, "a", 7), (21, "a", 1), (6, "a", 4), (55, "b", 9)],
    [(65, "a", 2), (30, "b", 5), (75, "c", -7), (79, "c", 8), (66, "a", 6)],       # watermark 45 -> 69
    [(10, "a", 1), (61, "b", 4), (125, "a", 3), (90, "c", 2), (62, "b", -1)],      # (10, a) late everywhere
    [(100, "b", 5), (119, "a", 2), (185, "b", 3), (101, "b", 6), (118, "a", -4)],
    [(121, "c", 1), (55, "a", 8), (170, "a", 5), (240, "c", 2), (171, "a", 9)],    # (55, a) late
    [(230, "a", 4), (199, "b", -3), (175, "b", 7), (231, "a", 1)],                 # (175, b): in [140, 200) only
    [(400, "z", 0)],                                                                 # closes everything before 390
]


def ts(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S")


def json_lines(events: list[tuple]) -> str:
    """Events (seconds after T0, user, v) as the JSON lines of an input file."""
    return "".join(json.dumps({"ts": ts(t), "user": u, "v": v}) + "\n" for t, u, v in events)


def result_rows(batch: DataFrame) -> list[tuple]:
    """A batch's (window start in seconds after T0, user, n, total, top) rows, in its order."""
    start = F.col("window.start").cast("long") - int(T0.timestamp())
    return [tuple(r) for r in batch.select(start, "user", "n", "total", "top").collect()]


def windows_of(t: int, size: int, slide: int) -> list[int]:
    """Starts of the windows of length `size` every `slide` seconds that hold time t."""
    last = (t // slide) * slide
    return [s for s in (last - i * slide for i in range(math.ceil(size / slide))) if s <= t < s + size]


def model(size: int = SIZE, slide: int = SLIDE, feeds: Optional[list[int]] = None) -> dict[tuple[int, str], tuple[int, int, int]]:
    """Final results, (count, sum, max) per window start and user: the events that were not late
    when they arrived; a window is emitted once the watermark reaches its end. `feeds`: how many of
    BATCHES were written at once (default one at a time); the query reads one per micro-batch and,
    after each feed, runs a batch without data that moves the watermark on. As in Spark, a micro-batch
    drops an event as late by the watermark of the micro-batch before it (its watermark for late
    events), so two batches read back to back drop by the same watermark."""
    wm = last = 0  # the watermark the next micro-batch runs with; that of the last one run
    values: dict[tuple[int, str], list[int]] = {}
    first = 0
    for n in feeds or [1] * len(BATCHES):
        for batch in BATCHES[first:first + n]:
            for t, user, v in batch:
                for s in windows_of(t, size, slide):
                    if s + size > last:
                        values.setdefault((s, user), []).append(v)
            last, wm = wm, max(wm, max(t for t, _, _ in batch) - DELAY)
        last, first = wm, first + n
    return {k: (len(vs), sum(vs), max(vs)) for k, vs in values.items() if k[0] + size <= wm}


class Run:
    """One query over its own input folder and checkpoint, fed one file per micro-batch; the sink
    keeps every batch's rows by batch id, and what a batch emitted the first time it ran."""

    def __init__(self, spark: SparkSession, root: Path, build: Callable[[DataFrame], DataFrame], mode: str) -> None:
        self.spark, self.build, self.mode = spark, build, mode
        self.src, self.ckpt = root / "in", root / "ckpt"
        self.src.mkdir(parents=True)
        self.files = 0
        self.first: dict[int, list[tuple]] = {}
        self.replayed: dict[int, list[tuple]] = {}
        self.query: Any = None

    def source_options(self) -> dict[str, str]:
        """How the file source takes its input: one file per micro-batch."""
        return {"maxFilesPerTrigger": "1"}

    def start(self) -> None:
        def sink(batch: DataFrame, batch_id: int) -> None:
            (self.replayed if batch_id in self.first else self.first)[batch_id] = sorted(result_rows(batch))

        events = (self.spark.readStream.schema("ts timestamp, user string, v long")
                  .options(**self.source_options()).json(str(self.src)))
        self.query = (self.build(events).writeStream.outputMode(self.mode).foreachBatch(sink)
                      .option("checkpointLocation", str(self.ckpt)).start())

    def feed(self, *batches: list[tuple]) -> None:
        """Writes a file of each batch's events, in order, then waits until the query has read them."""
        for events in batches:
            tmp = self.src / f".{self.files:05d}.tmp"
            tmp.write_text(json_lines(events))
            os.utime(tmp, (1_700_000_000 + self.files,) * 2)  # the file source takes files in this order
            tmp.rename(self.src / f"{self.files:05d}.json")
            self.files += 1
        self.query.processAllAvailable()

    def plan(self) -> str:
        return self.query._jsq.explainInternal(False)

    def stop(self, forget_last_commit: bool = False) -> None:
        """Stops the query; `forget_last_commit`: as if killed before its last batch committed, so
        the restarted query runs that batch again."""
        last = self.query.lastProgress["batchId"]
        self.query.stop()
        self.query = None
        if forget_last_commit:
            (self.ckpt / "commits" / str(last)).unlink()
            for crc in (self.ckpt / "commits").glob(f".{last}.crc"):
                crc.unlink()

    def emitted(self) -> dict[tuple[int, str], tuple[int, int, int]]:
        out: dict[tuple[int, str], tuple[int, int, int]] = {}
        for rows in self.first.values():
            for s, u, n, total, top in rows:
                assert (s, u) not in out, f"window {s} of {u} emitted twice"
                out[(s, u)] = (n, total, top)
        return out


def final(df: DataFrame) -> DataFrame:
    return suppress(df, Suppressed.until_window_closes(BufferConfig.unbounded()))
