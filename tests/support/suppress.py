"""suppress's query harness, shared by the suppress and session window tests: input files fed one per
micro-batch, the query's checkpoint and output by batch id (`Run`), a sink failing once to make a
batch replay (`CrashOnce`), and the state store providers suppress keeps its buffer in. Their
fixtures, `run` and `provider`, are defined here; tests/suppress/conftest.py and
tests/sessions/conftest.py give them to those folders' tests."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pytest
from pyspark.sql import DataFrame, SparkSession

from support.session import session_conf

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


class CrashOnce:
    """A `Run.start` fail_when that fails one batch, the first whose rows `when` holds for (by
    default, the first with any row), so the restarted query replays it; `batch` is its id, to
    compare the replay with the first attempt (`Run.attempts`). One instance crashes once across
    every start it is given to."""

    def __init__(self, when: Callable[[list[dict]], bool] = bool) -> None:
        self.when = when
        self.batch: Optional[int] = None

    def __call__(self, batch_id: int, rows: list[dict]) -> bool:
        if self.batch is None and self.when(rows):
            self.batch = batch_id
            return True
        return False


def windowed(r: dict) -> tuple:
    return (r["window"]["start"].replace(tzinfo=None), r["user"], r["count"])


def at(seconds: float) -> datetime:
    return (T0 + timedelta(seconds=seconds)).replace(tzinfo=None)


PROVIDERS = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "windowstore": "sluice.windowstore.InMemoryWindowStoreProvider",
}


@pytest.fixture
def run(spark: SparkSession, tmp_path: Path) -> Iterator[Run]:
    """A `Run` in the test's temporary folder, its query stopped after the test."""
    r = Run(spark, tmp_path)
    yield r
    r.stop()


@pytest.fixture(params=sorted(PROVIDERS))
def provider(request: pytest.FixtureRequest, spark: SparkSession) -> Iterator[str]:
    """Runs a test once per state store provider suppress keeps its buffer in (recorded in the
    checkpoint): Spark's two and sluice's in-memory window store."""
    with session_conf(spark, {"spark.sql.streaming.stateStore.providerClass": PROVIDERS[request.param]}):
        yield request.param
