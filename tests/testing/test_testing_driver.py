"""sluice.testing.PipelineDriver: a user's pipeline run batch by batch on the test's session, its
wall clock driven by the test. Each test states the exact batch a row must appear in (or the exact
clock time it must wait for), so a driver that ran an extra batch, read the system clock or lost a
batch across a restart fails it."""
from __future__ import annotations

import contextlib
import json
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sluice import BufferConfig, Suppressed, _conf, suppress
from sluice.testing import PipelineDriver
from support.session import session_conf

SCHEMA = "ts TIMESTAMP, key STRING"
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
PROVIDER_KEY = _conf.contract()["provider_class_key"]
INTERVAL_KEY = _conf.key("commit.interval.ms")
FUSED_KEY = _conf.key("suppress.fused")
PROVIDERS = {**_conf.state_store_providers(), "cache": _conf.spec()["caching_provider"]}


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def ev(s: float, key: str) -> tuple[datetime, str]:
    return (at(s), key)


def epoch(t: datetime) -> float:
    """A timestamp pyspark returned (naive, local time) as seconds after T0."""
    return t.timestamp() - T0.timestamp()


def windowed(r: Any) -> tuple[float, str, int]:
    return (epoch(r.window.start), r.key, r["count"])


def windowed_counts(events: DataFrame, delay: str = "0 seconds") -> DataFrame:
    return events.withWatermark("ts", delay).groupBy(F.window("ts", "10 seconds"), "key").count()


def finals(events: DataFrame) -> DataFrame:
    return suppress(windowed_counts(events), Suppressed.until_window_closes(BufferConfig.unbounded()))


@contextlib.contextmanager
def settings(spark: SparkSession, provider: str, fused: bool = True, **more: str) -> Iterator[None]:
    """The session settings a driver's query starts with (read at every start, so held around
    restarts too)."""
    with session_conf(spark, {PROVIDER_KEY: PROVIDERS[provider], FUSED_KEY: str(fused).lower(), **more}):
        yield


EVERY_STORE = ["hdfs", "rocksdb", "in_memory_window", "cache"]


# --- event time: the batch a final result appears in ---------------------------------------------

@pytest.mark.parametrize("fused", [True, False], ids=["fused", "buffered"])
@pytest.mark.parametrize("store", EVERY_STORE)
def test_a_windows_final_result_appears_in_exactly_the_batch_after_the_watermark_passes_it(
        spark: SparkSession, tmp_path: Path, store: str, fused: bool) -> None:
    with settings(spark, store, fused), PipelineDriver(spark, finals, SCHEMA, checkpoint=tmp_path) as d:
        d.pipe_input([ev(1, "a"), ev(2, "a"), ev(3, "b")])
        assert d.advance_wall_clock(timedelta(seconds=1)) == []       # batch 0: watermark -> 3 s
        d.pipe_input([ev(12, "a")])
        assert d.advance_wall_clock(timedelta(seconds=1)) == []       # batch 1 ran at watermark 3 s; -> 12 s
        closing = d.advance_wall_clock(timedelta(seconds=1))          # batch 2, no input: closes [0, 10)
        assert sorted(map(windowed, closing)) == [(0, "a", 2), (0, "b", 1)]
        assert d.advance_wall_clock(timedelta(seconds=1)) == []       # nothing due: no batch at all
        assert [b.batch_id for b in d.batches] == [0, 1, 2]
        assert [epoch_ms(b.wall_clock) for b in d.batches] == [1000, 2000, 3000]  # the driven clock
        if not fused:
            assert d.batches[2].metric("suppressionEmitTotal", "suppress") == 2
            assert d.batches[1].metric("suppressionBufferRecords", "suppress") == 3
        else:
            assert not any(op["operatorName"] == "suppress" for op in d.batches[2].operators)
        if store == "cache":
            assert sum(b.metric("cacheHits") + b.metric("cacheMisses") for b in d.batches) > 0


# --- wall clock: until_wall_clock_time_limit ------------------------------------------------------

def test_until_wall_clock_time_limit_releases_exactly_when_the_driven_clock_passes_the_limit(
        spark: SparkSession, tmp_path: Path, provider: str) -> None:
    def limited(events: DataFrame) -> DataFrame:
        return suppress(events.groupBy("key").count(),
                        Suppressed.until_wall_clock_time_limit(timedelta(seconds=30), BufferConfig.unbounded()))

    start = 1_000_000
    with PipelineDriver(spark, limited, SCHEMA, checkpoint=tmp_path, start=start) as d:
        d.pipe_input([ev(0, "a")])
        assert d.advance_wall_clock(1) == []                          # a buffered at start + 1 ms
        d.pipe_input([ev(1, "a"), ev(2, "b")])
        assert d.advance_wall_clock(9_999) == []                      # b buffered at start + 10 s
        assert d.advance_wall_clock(20_000) == []                     # start + 30 s: a waited 29.999 s
        assert len(d.batches) == 2                                    # ... and no batch ran for it
        released = d.advance_wall_clock(1)                            # start + 30.001 s: a waited 30 s
        assert [(r.key, r["count"]) for r in released] == [("a", 2)]
        assert d.wall_clock_ms == start + 30_001
        assert d.advance_wall_clock(9_998) == []                      # start + 39.999 s
        assert [(r.key, r["count"]) for r in d.advance_wall_clock(1)] == [("b", 1)]
        assert [b.batch_id for b in d.batches] == [0, 1, 2, 3]
        assert [epoch_ms(b.wall_clock) for b in d.batches] == [start + 1, start + 10_000, start + 30_001,
                                                               start + 40_000]


def epoch_ms(t: datetime) -> int:
    return int((t - datetime(1970, 1, 1, tzinfo=timezone.utc)) / timedelta(milliseconds=1))


# --- wall clock: the emission cache's commit interval ---------------------------------------------

def test_the_emission_cache_holds_updates_until_the_driven_interval_passes(
        spark: SparkSession, tmp_path: Path, provider: str) -> None:
    def counts(events: DataFrame) -> DataFrame:
        return events.groupBy("key").count()

    with session_conf(spark, {INTERVAL_KEY: "60000"}), \
            PipelineDriver(spark, counts, SCHEMA, checkpoint=tmp_path) as d:
        d.pipe_input([ev(0, "a"), ev(0, "b")])
        assert d.advance_wall_clock(1) == []                          # held from 1 ms
        d.pipe_input([ev(1, "a")])
        assert d.advance_wall_clock(30_000) == []                     # a's update absorbed
        assert d.last_batch.metric("emitCacheAbsorbedTotal", "emitCache") == 1
        assert d.advance_wall_clock(29_999) == []                     # 60 000 ms: the oldest waited 59.999 s
        assert len(d.batches) == 2
        flushed = d.advance_wall_clock(1)                             # a batch without input flushes
        assert sorted((r.key, r["count"]) for r in flushed) == [("a", 2), ("b", 1)]
        assert d.last_batch.metric("emitCacheForwardedTotal", "emitCache") == 2
        assert epoch_ms(d.last_batch.wall_clock) == 60_001


# --- restarts -------------------------------------------------------------------------------------

@pytest.mark.parametrize("fused", [True, False], ids=["fused", "buffered"])
@pytest.mark.parametrize("store", EVERY_STORE)
def test_a_restart_mid_way_emits_no_final_result_twice_and_loses_none(
        spark: SparkSession, tmp_path: Path, store: str, fused: bool) -> None:
    with settings(spark, store, fused), PipelineDriver(spark, finals, SCHEMA, checkpoint=tmp_path) as d:
        d.pipe_input([ev(1, "a"), ev(2, "b")])
        d.advance_wall_clock(1000)
        d.pipe_input([ev(11, "a")])                                    # piped, not yet read ...
        assert d.restart() == []                                      # ... read by the restart's first trigger
        assert [b.batch_id for b in d.batches] == [0, 1]
        assert sorted(map(windowed, d.advance_wall_clock(1000))) == [(0, "a", 1), (0, "b", 1)]  # batch 2
        d.pipe_input([ev(12, "a"), ev(25, "c")])
        d.fail_next_batch()                                            # killed before batch 3 commits
        failed = d.advance_wall_clock(1000)
        assert failed == [] and d.batches[-1].failed
        assert d.restart() == []                                      # batch 3 replayed: same rows
        assert [(b.batch_id, b.replay, b.failed) for b in d.batches[-2:]] == [(3, False, True), (3, True, False)]
        assert sorted(map(windowed, d.advance_wall_clock(1000))) == [(10, "a", 2)]  # batch 4 closes [10, 20)
        d.restart()
        d.pipe_input([ev(40, "d")])
        d.advance_wall_clock(1000)
        d.advance_wall_clock(1000)
        got = Counter(map(windowed, d.output()))
        assert got == Counter({(0, "a", 1): 1, (0, "b", 1): 1, (10, "a", 2): 1, (20, "c", 1): 1})
        assert Counter(map(windowed, d.read_output())) == got


def test_a_replayed_batch_emits_the_rows_it_emitted_first(spark: SparkSession, tmp_path: Path,
                                                          provider: str) -> None:
    with settings(spark, provider, fused=False), PipelineDriver(spark, finals, SCHEMA, checkpoint=tmp_path) as d:
        d.pipe_input([ev(1, "a"), ev(2, "b")])
        d.advance_wall_clock(1000)
        d.pipe_input([ev(30, "c")])
        d.advance_wall_clock(1000)                                     # batch 1: watermark -> 30 s
        d.fail_next_batch()
        first = d.advance_wall_clock(1000)                             # batch 2 closes [0, 10), then fails
        assert sorted(map(windowed, first)) == [(0, "a", 1), (0, "b", 1)]
        replayed = d.restart()
        assert sorted(map(windowed, replayed)) == sorted(map(windowed, first))
        assert d.batches[-1].wall_clock == d.batches[-2].wall_clock    # the batch keeps its logged time
        assert Counter(map(windowed, d.output())) == Counter({(0, "a", 1): 1, (0, "b", 1): 1})


# --- the same results as the pipeline run by hand -------------------------------------------------

BATCHES = [[ev(1, "a"), ev(2, "b"), ev(4, "a")], [ev(9, "b"), ev(13, "a")], [ev(15, "c"), ev(18, "a")],
           [ev(26, "b")], [ev(41, "a"), ev(44, "c")], [ev(70, "z")]]


def by_hand(spark: SparkSession, root: Path, pipeline: Any) -> list[tuple]:
    """`pipeline` run as a user runs it: a file source, one file per micro-batch, foreachBatch."""
    (root / "in").mkdir(parents=True)
    rows: list[tuple] = []
    events = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(root / "in"))
    query = (pipeline(events).writeStream.outputMode("update")
             .foreachBatch(lambda df, _id: rows.extend(windowed(r) for r in df.collect()))
             .option("checkpointLocation", str(root / "ckpt")).start())
    try:
        for i, batch in enumerate(BATCHES):
            (root / "in" / f"{i:03d}.json").write_text(
                "\n".join(json.dumps({"ts": t.isoformat(), "key": k}) for t, k in batch) + "\n")
            query.processAllAvailable()
    finally:
        query.stop()
    return rows


@pytest.mark.parametrize("pipeline", [finals, windowed_counts], ids=["suppress", "updates"])
def test_the_driver_gives_the_rows_of_the_pipeline_run_by_hand(spark: SparkSession, tmp_path: Path,
                                                               pipeline: Any) -> None:
    expected = by_hand(spark, tmp_path / "hand", pipeline)
    with PipelineDriver(spark, pipeline, SCHEMA, checkpoint=tmp_path / "driven") as d:
        for batch in BATCHES:
            d.pipe_input(batch)
            d.advance_wall_clock(1000)
            d.advance_wall_clock(1000)  # the batch without input a moved watermark may need
        got = [windowed(r) for r in d.output()]
    assert Counter(got) == Counter(expected)
    assert len(got) > 0


# --- misuse ---------------------------------------------------------------------------------------

def test_the_clock_only_moves_forward_and_a_failing_pipeline_raises_its_error(
        spark: SparkSession, tmp_path: Path) -> None:
    from pyspark.errors import StreamingQueryException

    with PipelineDriver(spark, finals, SCHEMA, checkpoint=tmp_path / "a") as d:
        with pytest.raises(ValueError, match="at least 1 ms"):
            d.advance_wall_clock(0)

    def failing(events: DataFrame) -> DataFrame:
        return events.withColumn("boom", F.raise_error(F.lit("pipeline bug")))

    with PipelineDriver(spark, failing, SCHEMA, output_mode="append", checkpoint=tmp_path / "b") as d:
        d.pipe_input([ev(1, "a")])
        with pytest.raises(StreamingQueryException, match="pipeline bug"):
            d.advance_wall_clock(1)
