"""suppress's query harness, shared by the suppress and session window tests: input files fed one per
micro-batch, the query's checkpoint and output by batch id, and the state store providers suppress
keeps its buffer in."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Optional

from pyspark.sql import DataFrame, SparkSession

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
METRICS = ["suppressionEmitTotal", "intermediateResultSuppressionTotal", "suppressionBufferRecords",
           "suppressionBufferBytes", "suppressionBufferBytesMax", "suppressionEvictTotal",
           "suppressionDiskBufferBytes", "suppressionIndexRebuildTotal", "recordLatenessMaxMs", "recordLatenessAvgMs", "lateRecordDropTotal"]


def ts(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S.%f")


class Run:
    """One query's input folder, checkpoint and collected output (batch id -> rows)."""

    def __init__(self, spark: SparkSession, root: Path) -> None:
        self.spark = spark
        self.src = root / "in"
        self.ckpt = root / "ckpt"
        self.src.mkdir(parents=True, exist_ok=True)
        self.files = 0
        self.batches: dict[int, list[dict]] = {}
        self.attempts: list[tuple[int, list[dict]]] = []
        self.query: Any = None

    def events(self) -> DataFrame:
        return (self.spark.readStream.schema("ts timestamp, user string, v long")
                .option("maxFilesPerTrigger", 1).json(str(self.src)))

    def write(self, *events: tuple) -> None:
        """Adds one input file: events are (seconds after T0, user[, v])."""
        path = self.src / f"{self.files:05d}.json"
        tmp = self.src / f".{self.files:05d}.tmp"
        with open(tmp, "w") as f:
            for e in events:
                f.write(json.dumps({"ts": ts(e[0]), "user": e[1], "v": e[2] if len(e) > 2 else 1}) + "\n")
        tmp.rename(path)
        self.files += 1

    def start(self, df: DataFrame, fail_when: Optional[Callable[[int, list], bool]] = None,
              trigger: Optional[dict] = None) -> Any:
        def sink(batch: DataFrame, batch_id: int) -> None:
            rows = [r.asDict(recursive=True) for r in batch.collect()]
            self.attempts.append((batch_id, rows))
            if fail_when is not None and fail_when(batch_id, rows):
                raise RuntimeError(f"simulated crash in batch {batch_id}")
            self.batches[batch_id] = rows

        w = df.writeStream.outputMode("update").foreachBatch(sink).option("checkpointLocation", str(self.ckpt))
        if trigger:
            w = w.trigger(**trigger)
        self.query = w.start()
        return self.query

    def feed(self, *events: tuple) -> None:
        self.write(*events)
        self.query.processAllAvailable()

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()
            self.query = None

    def rows(self) -> list[dict]:
        return [r for b in sorted(self.batches) for r in self.batches[b]]

    def progress_of(self, name: str = "suppress") -> list[dict]:
        return [op for p in self.query.recentProgress for op in p["stateOperators"] if op["operatorName"] == name]


def windowed(r: dict) -> tuple:
    return (r["window"]["start"].replace(tzinfo=None), r["user"], r["count"])


def at(seconds: float) -> datetime:
    return (T0 + timedelta(seconds=seconds)).replace(tzinfo=None)

PROVIDERS = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "windowstore": "sluice.windowstore.InMemoryWindowStoreProvider",
}
