"""Record cache (issue 5, part A): CachingStateStoreProvider in front of HDFS-backed and RocksDB
stores gives the same results as the delegate alone, serves repeated reads from memory, respects
the slot's byte share, and survives restarts on the same checkpoint."""
from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path
from typing import Any, Callable

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import sluice
from support.inputs import FileFedQuery
from support.metrics import executor_budgets, plugin_gauges
from support.session import session_conf, sluice_session
from support.sinks import count_sum_by_key

CACHE_BYTES = 256 * 1024  # executor total; local[2] gives each slot half
PLAIN = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "in_memory_window": "sluice.windowstore.InMemoryWindowStoreProvider",
}
CACHING = "sluice.cache.CachingStateStoreProvider"
SCHEMA = "k STRING, v LONG"


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    return sluice_session(statestore_cache_max_bytes=CACHE_BYTES)


@pytest.fixture(params=["hdfs", "rocksdb", "in_memory_window"])
def delegate(request: pytest.FixtureRequest) -> str:
    return request.param


def _batches(seed: int, n_batches: int, rows: int, keys: int) -> list[list[dict[str, Any]]]:
    rnd = random.Random(seed)
    return [[{"k": f"key-{rnd.randrange(keys)}", "v": rnd.randrange(100)} for _ in range(rows)]
            for _ in range(n_batches)]


class Run:
    """One streaming query fed one file per micro-batch, stoppable and restartable on its checkpoint."""

    def __init__(self, spark: SparkSession, root: Path, name: str, provider: str, delegate: str,
                 build: Callable[[SparkSession, Path], DataFrame], mode: str, partitions: int = 2):
        self.spark, self.root, self.name = spark, root, name
        self.provider, self.delegate, self.build, self.mode = provider, delegate, build, mode
        self.partitions = partitions
        self.inputs = root / "in"
        self.inputs.mkdir(parents=True)
        self.n = 0
        self.progress: list[dict] = []
        self.rows: list[tuple] = []
        self.query = None
        self.restarts = 0

    def start(self) -> None:
        def collect(df: DataFrame, batch_id: int) -> None:
            self.rows.extend(tuple(r) for r in df.collect())

        with session_conf(self.spark, {"spark.sql.streaming.stateStore.providerClass": self.provider,
                                       "spark.sluice.statestore.cache.delegate": self.delegate,
                                       "spark.sql.shuffle.partitions": str(self.partitions)}):
            self.query = (self.build(self.spark, self.inputs).writeStream.foreachBatch(collect)
                          .outputMode(self.mode)
                          .option("checkpointLocation", str(self.root / "ckpt")).start())

    def feed(self, rows: list[dict[str, Any]], directory: Path | None = None) -> None:
        d = directory or self.inputs
        (d / f"part-{self.n:05d}.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        self.n += 1
        self.query.processAllAvailable()

    def stop(self) -> None:
        self.progress += [json.loads(p.json) for p in self.query.recentProgress]
        self.query.stop()
        self.restarts += 1

    def metric(self, name: str) -> list[int]:
        """Per-batch values of an operator custom metric (first stateful operator)."""
        return [p["stateOperators"][0]["customMetrics"].get(name, 0)
                for p in self.progress if p.get("stateOperators")]


def _source(spark: SparkSession, path: Path) -> DataFrame:
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(path))


def _agg(spark: SparkSession, path: Path) -> DataFrame:
    return _source(spark, path).groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s"))


def _dedup(spark: SparkSession, path: Path) -> DataFrame:
    return _source(spark, path).dropDuplicates(["k"])


def _run_both(spark: SparkSession, tmp_path: Path, delegate: str, build, mode: str,
              batches: list, restart_after: int, partitions: int = 2) -> tuple[Run, Run]:
    """Runs the same query on the plain delegate and on the cache, stopping and restarting both."""
    runs = []
    for label, provider in (("plain", PLAIN[delegate]), ("cached", CACHING)):
        run = Run(spark, tmp_path / label, f"cache_{label}_{delegate}_{tmp_path.name}"[:60].replace("-", "_"),
                  provider, delegate, build, mode, partitions)
        run.start()
        for i, rows in enumerate(batches):
            if i == restart_after:
                run.stop()
                run.start()
            run.feed(rows)
        run.stop()
        runs.append(run)
    return runs[0], runs[1]


def _latest_per_key(rows: list[tuple]) -> dict:
    # update mode: the last row emitted for a key is its final value (rows kept in batch order)
    out = {}
    for r in rows:
        out[r[0]] = r
    return out


def test_aggregation_identical_and_served_from_cache(spark: SparkSession, tmp_path: Path, delegate: str) -> None:
    batches = _batches(1, 5, rows=300, keys=40)
    plain, cached = _run_both(spark, tmp_path, delegate, _agg, "update", batches, restart_after=3)
    assert sorted(cached.rows) == sorted(plain.rows)  # every emitted update, not just the final ones
    assert {k: (r[1], r[2]) for k, r in _latest_per_key(cached.rows).items()} == count_sum_by_key(batches)
    hits, misses = cached.metric("cacheHits"), cached.metric("cacheMisses")
    # batch 0 reads an empty store; batches 1-2 continue on the same provider and hit every key;
    # the restart (new query run, new providers) starts cold again in batch 3.
    assert hits[0] == 0 and hits[1] > 0 and hits[2] > 0
    assert misses[3] > 0
    assert hits[4] > 0
    ratios = cached.metric("cacheHitRatio")  # percent, averaged over the stores
    assert all(0 <= r <= 100 for r in ratios) and ratios[1] > 50 and ratios[3] < ratios[4]
    assert sum(cached.metric("delegateWrites")) > 0
    assert plain.metric("cacheHits") == [0] * len(plain.metric("cacheHits"))


def test_dedup_identical(spark: SparkSession, tmp_path: Path, delegate: str) -> None:
    batches = _batches(2, 4, rows=200, keys=150)
    plain, cached = _run_both(spark, tmp_path, delegate, _dedup, "append", batches, restart_after=2)
    assert sorted(r[0] for r in cached.rows) == sorted(r[0] for r in plain.rows)
    assert len({r[0] for r in cached.rows}) == len(cached.rows)  # each key once, even across the restart
    assert sum(cached.metric("cacheHits")) > 0


def test_stream_stream_join_identical(spark: SparkSession, tmp_path: Path, delegate: str) -> None:
    rnd = random.Random(3)
    right_dir = tmp_path / "right_in"
    right_dir.mkdir()

    def build(s: SparkSession, path: Path) -> DataFrame:
        left = _source(s, path).withColumnRenamed("v", "lv")
        right = _source(s, right_dir).withColumnRenamed("v", "rv")
        return left.join(right, "k")

    results = {}
    for label, provider in (("plain", PLAIN[delegate]), ("cached", CACHING)):
        run = Run(spark, tmp_path / label, f"join_{label}_{delegate}", provider, delegate, build, "append")
        rnd.seed(3)
        run.start()
        for i in range(4):
            if i == 2:
                run.stop()
                run.start()
            left = [{"k": f"key-{rnd.randrange(30)}", "v": rnd.randrange(100)} for _ in range(40)]
            right = [{"k": f"key-{rnd.randrange(30)}", "v": rnd.randrange(100)} for _ in range(40)]
            (right_dir / f"part-{label}-{i:05d}.json").write_text("\n".join(json.dumps(r) for r in right) + "\n")
            run.feed(left)
        run.stop()
        # the right side directory is shared: each run reads only its own files
        for f in right_dir.glob(f"part-{label}-*"):
            f.unlink()
        results[label] = run
    assert results["cached"].rows and sorted(results["cached"].rows) == sorted(results["plain"].rows)
    assert sum(results["cached"].metric("cacheHits")) > 0


def test_byte_bound_respected_with_dirty_evictions(spark: SparkSession, tmp_path: Path, delegate: str) -> None:
    (budget,) = executor_budgets(spark).values()
    share = budget["cache_bytes_per_slot"]
    assert share == CACHE_BYTES // 2
    # ~3000 distinct keys per batch need far more than the share: dirty entries are evicted and
    # written through mid-batch, and the results must still be exact.
    batches = _batches(4, 3, rows=6000, keys=3000)
    plain, cached = _run_both(spark, tmp_path, delegate, _agg, "update", batches, restart_after=2,
                              partitions=1)
    assert sorted(cached.rows) == sorted(plain.rows)
    sizes = cached.metric("cacheSizeBytes")
    assert sizes and all(0 < s <= share for s in sizes)
    assert all(e > 0 for e in cached.metric("cacheEvictions"))
    # evicted dirty entries reached the delegate before the flush at commit wrote the rest
    assert all(w >= len({r["k"] for r in b}) for w, b in zip(cached.metric("delegateWrites"), batches))


WINDOW_S, DELAY_S = 10, 10
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


class WindowedCounts(FileFedQuery):
    """`groupBy(window(ts, 10 s), k).count()` with a 10 s watermark, update mode, on the caching
    provider with one state partition (one store, so each batch's metrics are one store's). No-data
    batches are off, so each file is exactly one batch and eviction happens only in them."""

    def __init__(self, spark: SparkSession, root: Path, delegate: str):
        super().__init__(spark, root)
        self.delegate = delegate

    def start(self) -> None:
        conf = {"spark.sql.streaming.stateStore.providerClass": CACHING,
                "spark.sluice.statestore.cache.delegate": self.delegate,
                "spark.sql.shuffle.partitions": "1",
                "spark.sql.streaming.noDataMicroBatches.enabled": "false"}
        with session_conf(self.spark, conf):
            self.query = (self.spark.readStream.schema("k STRING, ts TIMESTAMP").option("maxFilesPerTrigger", 1)
                          .json(str(self.inputs)).withWatermark("ts", f"{DELAY_S} seconds")
                          .groupBy(F.window("ts", f"{WINDOW_S} seconds"), "k").count()
                          .writeStream.outputMode("update").format("noop")
                          .option("checkpointLocation", str(self.root / "ckpt")).start())

    def operator_per_batch(self) -> list[dict]:
        by_id = {p["batchId"]: p["stateOperators"][0] for p in self.progress
                 if p.get("stateOperators") and p["numInputRows"] > 0}
        return [by_id[b] for b in sorted(by_id)]


def _windowed_batches() -> list[list[tuple[str, float]]]:
    """(k, seconds after T0) rows: batch i has rows in window i and, from batch 1 on, in window
    i - 1 (keys seen the batch before, and new ones). Times end in .5 s, so no watermark (a whole
    second less .5, see below) ever equals a window end."""
    rnd = random.Random(11)
    return [[(rnd.choice("abcdef"), WINDOW_S * w + rnd.randrange(WINDOW_S - 1) + 0.5)
             for w in ([i - 1, i] if i else [i]) for _ in range(5)] for i in range(5)]


def _expected_cache_metrics(batches: list[list[tuple[str, float]]], restart_before: int) -> list[dict[str, int]]:
    """What each batch of `WindowedCounts` does with the record cache, from its rules:
    - Spark's restore step gets every (window, k) key of the batch once (after the merge
      aggregation): a hit if the store's provider holds the key in the slot cache, i.e. put or read
      it since the provider was created (a restarted query opens new providers), else a miss,
      which reads the delegate (no write-behind at interval 0);
    - the save step puts every key (dirty entries, one per key), then scans the store for windows
      the watermark closed (window end <= watermark = latest event time of the earlier batches
      minus the delay): the scan first flushes the puts to the delegate (a flush), and the removes
      it makes are flushed at commit (a second flush, only when it removed something);
    - the delegate commits once per batch."""
    out = []
    state: set[tuple[float, str]] = set()
    cached: set[tuple[float, str]] = set()
    latest = None
    for i, rows in enumerate(batches):
        if i == restart_before:
            cached = set()
        watermark = latest - DELAY_S if latest is not None else 0.0
        assert all(t > watermark for _, t in rows)  # no late row: every row reaches the store
        keys = {(t // WINDOW_S * WINDOW_S, k) for k, t in rows}
        hits = len(keys & cached)
        state |= keys
        evicted = {key for key in state if key[0] + WINDOW_S <= watermark}
        state -= evicted
        cached |= keys
        latest = max([t for _, t in rows] + ([latest] if latest is not None else []))
        out.append({"cacheHits": hits, "cacheMisses": len(keys) - hits, "delegateReads": len(keys) - hits,
                    "cacheHitRatio": hits * 100 // len(keys),
                    "cacheFlushes": 1 + (1 if evicted else 0), "delegateWrites": len(keys) + len(evicted),
                    "delegateCommits": 1,
                    "numRowsUpdated": len(keys), "numRowsRemoved": len(evicted), "numRowsTotal": len(state)})
    return out


@pytest.mark.parametrize("delegate", ["hdfs", "rocksdb"])
def test_cache_metrics_count_reads_flushes_and_delegate_io_exactly(
        spark: SparkSession, tmp_path: Path, delegate: str) -> None:
    batches = _windowed_batches()
    restart_before = 3
    expected = _expected_cache_metrics(batches, restart_before)
    # the input exercises every rule: hits, misses, a cold restart, batches with and without eviction
    assert expected[1]["cacheHits"] > 0 and expected[1]["cacheMisses"] > 0
    assert expected[restart_before]["cacheHits"] == 0 and expected[restart_before]["numRowsRemoved"] > 0
    assert {e["cacheFlushes"] for e in expected} == {1, 2}
    q = WindowedCounts(spark, tmp_path, delegate)
    q.start()
    for i, rows in enumerate(batches):
        if i == restart_before:
            q.stop()
            q.start()
        q.feed([{"k": k, "ts": (T0 + dt.timedelta(seconds=t)).isoformat()} for k, t in rows])
    q.stop()
    assert len(q.operator_per_batch()) == len(batches)
    got = [{name: (op[name] if name.startswith("numRows") else op["customMetrics"].get(name)) for name in e}
           for op, e in zip(q.operator_per_batch(), expected)]
    assert got == expected


def test_many_partitions_share_the_slot_caches_within_the_executor_budget(
        spark: SparkSession, tmp_path: Path) -> None:
    # 8 state partitions on 2 task slots, ~8x more state than the executor budget C. One cache per
    # partition bounded by C/T (the old design) would hold 8 x C/2; slot caches hold at most C.
    # The executor's gauges show it: what the slot caches hold after each batch, and the most they
    # ever held at once (during batches too, and over every earlier test of this session).
    batches = _batches(5, 3, rows=6000, keys=6000)
    run = Run(spark, tmp_path / "cached", "slots", CACHING, "rocksdb", _agg, "update", partitions=8)
    run.start()
    held = []
    for i, rows in enumerate(batches):
        if i == 2:
            run.stop()
            run.start()
        run.feed(rows)
        held.append(plugin_gauges(spark)["cacheBytes"])
    run.stop()
    gauges = plugin_gauges(spark)
    assert gauges["cacheMaxBytes"] == CACHE_BYTES
    assert all(h <= CACHE_BYTES for h in held), held
    assert max(held) > 0.75 * CACHE_BYTES, held  # the caches were full
    assert max(held) <= gauges["cachePeakBytes"] <= CACHE_BYTES
    # every partition's store reported only what it holds in its slot's cache
    assert all(0 < s <= CACHE_BYTES // 2 * 8 for s in run.metric("cacheSizeBytes"))  # summed over 8
    assert all(e > 0 for e in run.metric("cacheEvictions"))
    assert {k: (r[1], r[2]) for k, r in _latest_per_key(run.rows).items()} == count_sum_by_key(batches)


def test_changing_the_delegate_on_a_checkpoint_fails_naming_both(spark: SparkSession, tmp_path: Path) -> None:
    from pyspark.errors import StreamingQueryException
    batches = _batches(6, 3, rows=200, keys=50)
    run = Run(spark, tmp_path / "q", "delegate_change", CACHING, "hdfs", _agg, "update")
    run.start()
    run.feed(batches[0])
    run.stop()
    run.delegate = "rocksdb"  # a RocksDB store would not see the HDFS-backed store's files
    run.start()
    with pytest.raises(StreamingQueryException) as info:
        run.feed(batches[1])
    message = str(info.value)
    assert "spark.sluice.statestore.cache.delegate is 'rocksdb'" in message
    assert "written with spark.sluice.statestore.cache.delegate='hdfs'" in message
    run.query.stop()
    run.delegate = "hdfs"  # back to the recorded delegate: the state is intact
    run.start()
    run.feed(batches[2])
    run.stop()
    assert {k: (r[1], r[2]) for k, r in _latest_per_key(run.rows).items()} == count_sum_by_key(batches)


def test_configure_selects_the_caching_provider() -> None:
    from pyspark.sql import SparkSession as S
    b = sluice.configure(S.builder, state_store_cache=True, statestore_cache_delegate="HDFS")
    assert b._options["spark.sql.streaming.stateStore.providerClass"] == CACHING
    assert b._options["spark.sluice.statestore.cache.delegate"] == "hdfs"
    with pytest.raises(ValueError, match="spark.sluice.statestore.cache.delegate.*rocksdb, hdfs"):
        sluice.configure(S.builder, statestore_cache_delegate="leveldb")
    with pytest.raises(ValueError, match="True or False"):
        sluice.configure(S.builder, state_store_cache="yes")


def test_bad_delegate_fails_session_start_naming_the_key() -> None:
    from support.session import BASE_CONF, fresh_builder, stop_session
    stop_session()
    builder = fresh_builder().master("local[2]").appName("sluice-cache-conf")
    for k, v in {**BASE_CONF, "spark.sluice.statestore.cache.delegate": "leveldb"}.items():
        builder = builder.config(k, v)
    with pytest.raises(sluice.SluiceConfError) as info:
        sluice.configure(builder, state_store_cache=True).getOrCreate()
    message = str(info.value)
    assert "spark.sluice.statestore.cache.delegate" in message and "'leveldb'" in message
    assert "rocksdb, hdfs, in_memory_window" in message and "\n" not in message
