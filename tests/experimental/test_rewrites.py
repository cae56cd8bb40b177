"""The plan rewrites (window slicing, partial aggregation by hash) on one query with sluice's other
features: the record cache as its state store, the emission cache's commit interval and the input
bound.

The input is support.slicing's batches. Each run's files are placed at once, and the input bound (smaller
than any file) splits them into one micro-batch per file. The query runs the first four files with a
1 h commit interval (the emission cache still holds update-mode rows when it stops), is restarted on
its checkpoint with a 1 ms interval (held rows are due) and runs the rest.

The reference is the same query on Spark alone, run the same way: Spark's HDFS-backed store, no
rewrite, one file per batch by maxFilesPerTrigger, the same restart. With batches queued at once,
Spark drops late rows by the watermark of the batch before (the no-data batches that close the gap
do not run between them), so support.slicing's model of lateness does not hold here. Expected:
- final results (sluice's fused suppress until_window_closes; Spark's append mode): the same rows,
  each window once;
- update mode: the same last row per (window, user).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from sluice._conf import spec, state_store_providers
from support import partial_hash as hashed
from support import slicing
from support.session import session_conf
from support.slicing import BATCHES, SIZE, SLIDE, final, json_lines, result_rows

# dev/test: run on every supported Spark minor
pytestmark = pytest.mark.every_minor

INTERVAL_KEY = "spark.sluice.commit.interval.ms"
PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"
FIRST = 4  # files of the first run


BOUND = min(len(json_lines(b).encode()) for b in BATCHES) - 1


@dataclass(frozen=True)
class Rewrite:
    """A rewrite's key, query, the columns the sink reads, and how its plan's map side reads."""
    key: str
    window: Column
    aggregates: Callable[[DataFrame, Column], DataFrame]
    rows: Callable[[DataFrame], DataFrame]
    map_side: Callable[[str], Any]
    rewritten: Any


def rewrites() -> dict[str, Rewrite]:
    return {
        "slicing": Rewrite(slicing.SLICING_KEY, F.window("ts", f"{SIZE} seconds", f"{SLIDE} seconds"),
                           slicing.aggregates, lambda df: df, slicing.map_side, slicing.SLICED),
        "partial_hash": Rewrite(hashed.KEY, F.window("ts", f"{SIZE} seconds"), hashed.aggregates, hashed.rows,
                                hashed.map_side, "hash"),
    }


def write_files(src: Path, files: range) -> None:
    """The files at once, in order (the file source takes the oldest first)."""
    now = time.time()
    for i in files:
        tmp = src / f".{i:05d}.tmp"
        tmp.write_text(json_lines(BATCHES[i]))
        os.utime(tmp, (now + i, now + i))
        tmp.rename(src / f"{i:05d}.json")


def last_rows(emitted: list[tuple]) -> dict[tuple[int, str], tuple]:
    last: dict[tuple[int, str], tuple] = {}
    for s, u, *values in emitted:
        last[(s, u)] = tuple(values)
    return last


class Runs:
    """The query over its own input folder and checkpoint, run twice: the first FIRST files, then
    after a restart on the checkpoint the rest, each run's files placed at once. `sluice`: the
    rewrite on, the record cache as the store, the input bound splitting the files, and a commit
    interval of `intervals` (first run, second run); else Spark alone: Spark's HDFS-backed store, one
    file per batch by maxFilesPerTrigger."""

    def __init__(self, spark: SparkSession, root: Path, r: Rewrite, mode: str, sluice: bool,
                 intervals: tuple[str, str] = ("0", "0")) -> None:
        self.spark, self.r, self.mode, self.sluice = spark, r, mode, sluice
        self.src, self.ckpt = root / "in", root / "ckpt"
        self.src.mkdir(parents=True)
        self.emitted: list[tuple] = []
        self.progress: list[dict] = []
        self.plans: list[Any] = []
        self.run(range(FIRST), intervals[0])
        self.held_at_first_stop = self.op_metrics("emitCache", "emitCacheBytes")
        self.run(range(FIRST, len(BATCHES)), intervals[1])

    def run(self, files: range, interval: str) -> None:
        providers = state_store_providers()
        settings = ({self.r.key: "true", INTERVAL_KEY: interval, PROVIDER_KEY: spec()["caching_provider"]}
                    if self.sluice else {PROVIDER_KEY: providers["hdfs"]})
        with session_conf(self.spark, settings):
            reader = self.spark.readStream.schema("ts timestamp, user string, v long")
            reader = (reader.option("sluice.maxBytesPerTrigger", str(BOUND)) if self.sluice
                      else reader.option("maxFilesPerTrigger", 1))
            agg = self.r.aggregates(reader.json(str(self.src)), self.r.window)
            if self.mode == "final":  # sluice's final results; Spark's own: append mode
                out, output_mode = (final(agg), "update") if self.sluice else (agg, "append")
            else:
                out, output_mode = agg, "update"
            q = (self.r.rows(out).writeStream.outputMode(output_mode)
                 .foreachBatch(lambda batch, _: self.emitted.extend(result_rows(batch)))
                 .option("checkpointLocation", str(self.ckpt)).start())
        try:
            write_files(self.src, files)
            q.processAllAvailable()
            self.plans.append(self.r.map_side(q._jsq.explainInternal(False)))
            self.progress.extend(json.loads(p.json) for p in q.recentProgress)
        finally:
            q.stop()

    def op_metrics(self, operator: str | None, metric: str) -> list[int]:
        """`metric` of each batch's `operator` (None: of every stateful operator)."""
        return [op["customMetrics"].get(metric, 0) for p in self.progress for op in p.get("stateOperators", [])
                if operator is None or op["operatorName"] == operator]

    def data_batches(self) -> int:
        return len([p for p in self.progress if p["numInputRows"] > 0])


@pytest.mark.parametrize("rewrite", ["slicing", "partial_hash"])
@pytest.mark.parametrize("mode", ["update", "final"])
def test_a_rewritten_query_with_the_record_cache_commit_interval_and_input_bound(
        spark: SparkSession, tmp_path: Path, rewrite: str, mode: str) -> None:
    """The rows of Spark alone on the same batches (module doc), with the rewrite in the plan, the
    bound splitting the files and the record cache in use."""
    r = rewrites()[rewrite]
    # update mode: the 1 h interval holds rows past the first stop, the 1 ms one forwards them
    got = Runs(spark, tmp_path / "sluice", r, mode, sluice=True,
               intervals=("1h", "1ms") if mode == "update" else ("1h", "0"))
    alone = Runs(spark, tmp_path / "spark", r, mode, sluice=False)

    assert got.plans == [r.rewritten, r.rewritten], got.plans
    assert alone.plans[0] != r.rewritten, alone.plans
    # the bound split the files into one batch each, as maxFilesPerTrigger did for Spark alone
    assert got.data_batches() == alone.data_batches() == len(BATCHES)
    assert sum(got.op_metrics(None, "cacheMisses")) > 0, "the record cache was not in use"
    if mode == "final":
        assert len(alone.emitted) >= 8
        assert len(set((s, u) for s, u, *_ in got.emitted)) == len(got.emitted), "a window emitted twice"
        assert sorted(got.emitted) == sorted(alone.emitted)
        return
    assert got.held_at_first_stop and got.held_at_first_stop[-1] > 0, \
        "the 1 h commit interval held no row when the first run stopped"
    assert len(last_rows(alone.emitted)) >= 12
    assert last_rows(got.emitted) == last_rows(alone.emitted)
