"""Emission cache (issue 5, part B): with spark.sluice.commit.interval.ms > 0 every update-mode
aggregation forwards the latest row per key once per interval, early (least recently updated
first) under byte pressure, from no-data batches when due, and loses nothing across a restart."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from support.inputs import FileFedQuery
from support.metrics import executor_budgets
from support.session import session_conf, sluice_session
from support.sinks import count_sum_by_key

CACHE_BYTES = 256 * 1024  # same session as test_cache.py; each of the 2 slots gets half
INTERVAL_KEY = "spark.sluice.commit.interval.ms"


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    return sluice_session(statestore_cache_max_bytes=CACHE_BYTES)


class Query(FileFedQuery):
    """A counting aggregation over one file per micro-batch, collecting (batch id, rows)."""

    def __init__(self, spark: SparkSession, root: Path):
        super().__init__(spark, root)
        self.batches: list[tuple[int, list[tuple]]] = []

    def start(self, interval: str, trigger_ms: int | None = None, partitions: int = 2,
              project: str | None = None) -> None:
        """`project`: one SQL expression the rows are written as (the optimizer folds it into the aggregation)."""
        with session_conf(self.spark, {INTERVAL_KEY: interval, "spark.sql.shuffle.partitions": str(partitions)}):
            df = (self.spark.readStream.schema("k STRING, v LONG").option("maxFilesPerTrigger", 1)
                  .json(str(self.inputs)).groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s")))
            if project:
                df = df.selectExpr(project)

            def collect(batch: DataFrame, batch_id: int) -> None:
                self.batches.append((batch_id, [tuple(r) for r in batch.collect()]))

            w = (df.writeStream.foreachBatch(collect).outputMode("update")
                 .option("checkpointLocation", str(self.root / "ckpt")))
            if trigger_ms:
                w = w.trigger(processingTime=f"{trigger_ms} milliseconds")
            self.query = w.start()

    @property
    def rows(self) -> list[tuple]:
        return [r for _, rows in self.batches for r in rows]

    def ops(self, name: str) -> list[dict]:
        return [op for p in self.progress for op in p.get("stateOperators", []) if op["operatorName"] == name]

    def metric(self, name: str) -> int:
        return sum(op["customMetrics"].get(name, 0) for op in self.ops("emitCache"))


def _rows(keys: list[str], rounds: int) -> list[dict[str, Any]]:
    return [{"k": k, "v": i} for i in range(rounds) for k in keys]


def test_holds_updates_for_the_interval_and_loses_nothing_across_a_restart(
        spark: SparkSession, tmp_path: Path, provider: str) -> None:
    keys = [f"k{i}" for i in range(6)]
    batches = [_rows(keys, 2), _rows(keys[:4], 3), _rows(keys[2:], 1)]
    q = Query(spark, tmp_path)
    q.start("1h")
    for b in batches:
        q.feed(b)
    q.stop()  # as if killed: the held rows live only in the checkpoint's state
    assert q.rows == []  # within the interval every update was absorbed
    # 6 + 4 + 4 aggregation updates, 6 held keys: 8 replaced without being forwarded
    assert q.metric("emitCacheAbsorbedTotal") == 8
    assert q.metric("emitCacheForwardedTotal") == 0
    assert q.ops("emitCache")[-1]["customMetrics"]["emitCacheBytes"] > 0
    # each partition scans its store once, when the query starts; later batches keep the index
    rebuilds = lambda: [op["customMetrics"]["emitCacheIndexRebuildTotal"] for op in q.ops("emitCache")]
    assert rebuilds() == [2, 0, 0]

    last = _rows(keys[:1], 1)
    q.start("1ms")  # restarted on the same checkpoint; now every held row is due
    q.feed(last)
    q.stop()
    forwarded = q.rows
    assert sorted(r[0] for r in forwarded) == sorted(keys)  # each key exactly once
    assert {r[0]: (r[1], r[2]) for r in forwarded} == count_sum_by_key(batches + [last])  # with its latest value
    assert q.metric("emitCacheForwardedTotal") == len(keys)
    assert rebuilds() == [2, 0, 0, 2]  # a restart rebuilds from the checkpointed rows


def test_interval_set_back_to_zero_forwards_the_held_rows(spark: SparkSession, tmp_path: Path) -> None:
    """A checkpoint with held rows restarted with interval 0 keeps the emission cache for one
    purpose: its first batch forwards every held row, with the batch's own updates."""
    keys = [f"k{i}" for i in range(4)]
    first = _rows(keys, 2)
    q = Query(spark, tmp_path)
    q.start("1h")
    q.feed(first)
    q.stop()
    assert q.rows == []
    held = len(q.batches)
    last = _rows(keys[:1], 1)
    q.start("0")
    q.feed(last)
    assert [sorted(rows) for _, rows in q.batches[held:]] == [sorted(
        (k, n, s) for k, (n, s) in count_sum_by_key([first, last]).items())]
    q.feed(_rows(keys[1:2], 1))  # nothing held any more: only the batch's own update
    q.stop()
    assert sorted(q.batches[-1][1]) == [("k1", 3, 1)]
    assert q.metric("emitCacheForwardedTotal") == len(keys) + 1


def test_a_projection_folded_into_the_aggregation_keeps_the_cache(spark: SparkSession, tmp_path: Path) -> None:
    """A sink's projection over the aggregation (here one string per row) is folded into it by the
    optimizer, which drops the grouping columns from its output: sluice splits it again below the cache."""
    keys = [f"k{i}" for i in range(4)]
    batches = [_rows(keys, 2), _rows(keys, 1)]
    q = Query(spark, tmp_path)
    q.start("1h", project="concat_ws(':', k, n, s) as line")
    for b in batches:
        q.feed(b)
    q.stop()
    assert q.rows == [] and q.metric("emitCacheAbsorbedTotal") == len(keys)  # the second batch's updates
    q.start("1ms", project="concat_ws(':', k, n, s) as line")
    q.feed(_rows(keys[:1], 1))
    q.stop()
    expected = count_sum_by_key(batches + [_rows(keys[:1], 1)])
    assert sorted(r[0] for r in q.rows) == sorted(f"{k}:{n}:{s}" for k, (n, s) in expected.items())


def test_an_interval_set_on_a_checkpoint_that_ran_without_one_starts_the_cache_empty(
        spark: SparkSession, tmp_path: Path) -> None:
    """A query that ran without an emission cache, restarted with a commit interval on the same
    checkpoint: the cache's stores start empty at that batch (found by Spark's own
    StreamingAggregationSuite under sluice), hold its updates, and forward them when the interval is
    set back to 0."""
    keys = [f"k{i}" for i in range(4)]
    first, second, third = _rows(keys, 2), _rows(keys[:2], 1), _rows(keys[2:], 1)
    q = Query(spark, tmp_path)
    q.start("0")
    q.feed(first)  # no emission cache: every update forwarded
    q.stop()
    assert sorted(q.batches[-1][1]) == sorted((k, n, s) for k, (n, s) in count_sum_by_key([first]).items())
    before = len(q.batches)
    q.start("1h")
    q.feed(second)  # the cache appears: it holds this batch's updates
    q.stop()
    assert [rows for _, rows in q.batches[before:]] == [[]]
    q.start("0")
    q.feed(third)  # interval 0 again: the held rows and this batch's own leave together
    q.stop()
    assert sorted(q.batches[-1][1]) == sorted((k, n, s) for k, (n, s) in count_sum_by_key([first, second, third]).items()
                                              if k in {r["k"] for r in second + third})


def test_interval_zero_is_exactly_sparks_output(spark: SparkSession, tmp_path: Path) -> None:
    keys = [f"k{i}" for i in range(5)]
    batches = [_rows(keys, 2), _rows(keys[:2], 1)]
    q = Query(spark, tmp_path)
    q.start("0")
    for b in batches:
        q.feed(b)
    q.stop()
    assert q.ops("emitCache") == []
    assert [sorted(rows) for _, rows in q.batches] == [
        sorted((k, 2, 1) for k in keys), sorted((k, 3, 1) for k in keys[:2])]


def test_evicts_least_recently_updated_first_when_the_share_is_exceeded(spark: SparkSession, tmp_path: Path) -> None:
    share = next(iter(executor_budgets(spark).values()))["cache_bytes_per_slot"]
    old = [f"old-{i:04d}" for i in range(500)]
    new = [f"new-{i:04d}" for i in range(500)]
    q = Query(spark, tmp_path)
    q.start("1h", partitions=1)
    q.feed(_rows(old, 1))
    assert q.rows == []  # 500 rows fit in the share
    q.feed(_rows(new, 1))
    q.stop()
    evicted = q.rows
    assert evicted, "1000 rows exceed the share: some must be forwarded early"
    assert {r[0] for r in evicted} <= set(old)  # the least recently updated go first
    assert q.metric("emitCacheEvictTotal") == len(evicted) == q.metric("emitCacheForwardedTotal")
    assert all(0 < op["customMetrics"]["emitCacheBytes"] <= share for op in q.ops("emitCache"))


def test_no_data_batch_flushes_due_rows(spark: SparkSession, tmp_path: Path) -> None:
    keys = [f"k{i}" for i in range(4)]
    q = Query(spark, tmp_path)
    q.start("1500ms", trigger_ms=200)
    rows = _rows(keys, 3)
    q.feed(rows)  # one data batch; nothing more arrives
    deadline = time.monotonic() + 60
    while not q.rows and time.monotonic() < deadline:
        time.sleep(0.2)  # waiting on the wall-clock interval itself
    flush_batch = next(b for b, r in q.batches if r)
    while time.monotonic() < deadline and not any(
            p.batchId >= flush_batch for p in q.query.recentProgress):
        time.sleep(0.1)  # the batch's progress is reported just after its sink ran
    q.stop()
    assert sorted(q.rows) == sorted((k, n, s) for k, (n, s) in count_sum_by_key([rows]).items())
    by_batch = {p["batchId"]: p for p in q.progress}
    assert by_batch[flush_batch]["numInputRows"] == 0  # the flush came from a no-data batch
    assert q.metric("emitCacheForwardedTotal") == len(keys)


def test_sigkill_and_restart_loses_no_held_row(spark: SparkSession, tmp_path: Path) -> None:
    """SIGKILL the whole process (driver JVM included) of a query on the caching provider whose
    emission cache holds every update, then restart here on its checkpoint: every key's latest
    value still arrives, computed over all input exactly once."""
    import os

    from support.cache_kill_child import counts, file_sink
    from support.children import kill_after_batches
    from support.sinks import drain_to_files

    src, ckpt, out = tmp_path / "in", tmp_path / "ckpt", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    files = 10
    batches = [[{"k": f"k{(f * 3 + i) % 7}", "v": f * 10 + i} for i in range(6)] for f in range(files)]
    for f, rows in enumerate(batches):
        (src / f"{f:03d}.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        os.utime(src / f"{f:03d}.json", (1_700_000_000 + f, 1_700_000_000 + f))

    kill_after_batches("cache_kill_child.py", [str(src), str(ckpt), str(out)], out, batches=3)
    before = sorted(out.glob("*.json"))
    assert len(before) < files  # killed mid-stream
    assert all(json.loads(p.read_text()) == [] for p in before)  # everything was being held

    drain_to_files(spark, counts(spark, str(src)), file_sink(str(out)), ckpt, {
        "spark.sql.streaming.stateStore.providerClass": "sluice.cache.CachingStateStoreProvider",
        INTERVAL_KEY: "1ms"})

    latest: dict[str, tuple[int, int]] = {}
    for path in sorted(out.glob("*.json")):
        for k, n, s in json.loads(path.read_text()):
            latest[k] = (n, s)
    assert latest == count_sum_by_key(batches)


def test_both_caches_share_one_budget(spark: SparkSession, tmp_path: Path) -> None:
    """On the caching provider with a commit interval, the record cache and the emission cache
    each get half of the slot's share."""
    share = next(iter(executor_budgets(spark).values()))["cache_bytes_per_slot"]
    q = Query(spark, tmp_path)
    caching = {"spark.sql.streaming.stateStore.providerClass": "sluice.cache.CachingStateStoreProvider"}
    with session_conf(spark, caching):
        q.start("1h", partitions=1)
    q.feed(_rows([f"key-{i:05d}" for i in range(3000)], 1))
    q.stop()
    emit = q.ops("emitCache")[-1]["customMetrics"]
    agg = [op for p in q.progress for op in p["stateOperators"] if op["operatorName"] != "emitCache"][-1]
    assert emit["emitCacheEvictTotal"] > 0 and 0 < emit["emitCacheBytes"] <= share // 2
    assert agg["customMetrics"]["cacheEvictions"] > 0 and 0 < agg["customMetrics"]["cacheSizeBytes"] <= share // 2
    assert len(q.rows) == emit["emitCacheEvictTotal"]


def test_partitions_share_the_budget_deterministically(spark: SparkSession, tmp_path: Path) -> None:
    """8 emission-cache partitions on 2 task slots: each may hold C / max(T, N) = C/8, a share that
    depends on configuration alone (not on what else runs in the slot), so the query's held rows
    stay within the executor's budget C and a replay forwards the same rows."""
    keys = [f"key-{i:05d}" for i in range(4000)]  # far more than the budget can hold
    batches = [_rows(keys, 1), _rows(keys[::2], 1)]
    q = Query(spark, tmp_path)
    q.start("1h", partitions=8)
    for b in batches:
        q.feed(b)
    q.stop()
    for p in [p for p in q.progress if p["numInputRows"] > 0]:
        emit = next(op for op in p["stateOperators"] if op["operatorName"] == "emitCache")
        # emitCacheBytes is summed over the 8 partitions: what they all hold after the batch
        assert CACHE_BYTES // 2 < emit["customMetrics"]["emitCacheBytes"] <= CACHE_BYTES
    assert q.metric("emitCacheEvictTotal") > 0
    q.start("1ms", partitions=8)  # everything still held is due: nothing was lost
    q.feed([])
    q.stop()
    latest = {r[0]: (r[1], r[2]) for r in q.rows}
    assert latest == count_sum_by_key(batches)


def test_replayed_batch_forwards_the_same_rows(spark: SparkSession, tmp_path: Path) -> None:
    """A batch run again on the same input and state version (its commit deleted, as after a crash
    between the sink and the commit log) forwards exactly the rows it forwarded the first time,
    early evictions included."""
    import shutil
    keys = [f"key-{i:05d}" for i in range(3000)]
    q = Query(spark, tmp_path)
    q.start("1h", partitions=3)
    q.feed(_rows(keys, 1))
    q.feed(_rows(keys[::3], 1))
    q.stop()
    first = {b: sorted(rows) for b, rows in q.batches}
    assert first[1], "the second batch must forward rows early for the replay to mean anything"
    (tmp_path / "ckpt" / "commits" / "1").unlink()
    shutil.rmtree(tmp_path / "ckpt" / "commits" / ".1.crc", ignore_errors=True)
    (tmp_path / "ckpt" / "commits" / ".1.crc").unlink(missing_ok=True)
    q.batches.clear()
    q.start("1h", partitions=3)
    q.query.processAllAvailable()
    q.stop()
    assert {b: sorted(rows) for b, rows in q.batches} == {1: first[1]}


def _suppressed_counts(spark: SparkSession, src: Path) -> DataFrame:
    import sluice
    events = (spark.readStream.schema("ts TIMESTAMP, user STRING").option("maxFilesPerTrigger", 1)
              .json(str(src)).withWatermark("ts", "2 seconds"))
    counts = events.groupBy(F.window("ts", "10 seconds"), "user").count()
    return sluice.suppress(counts, sluice.Suppressed.until_window_closes(sluice.BufferConfig.unbounded()))


def test_suppress_with_a_commit_interval_emits_every_final_result(
        spark: SparkSession, tmp_path: Path, provider: str) -> None:
    """The composition that lost every final result: a cluster-wide commit interval (30 s, longer
    than the test) with suppress. The emission cache is not placed below suppress, the plan says
    why, and all 6 final results arrive."""
    src = tmp_path / "in"
    src.mkdir()
    # 6 windows of 10 s, 3 events each (two users); a last event closes them all
    files = [[{"ts": f"2026-01-01T00:00:{w * 10 + i * 3:02d}Z", "user": "ab"[i % 2]} for i in range(3)]
             for w in range(6)] + [[{"ts": "2026-01-01T00:01:30Z", "user": "a"}]]
    truth: dict[tuple[str, str], int] = {}
    for rows in files[:-1]:
        for r in rows:
            start = f"2026-01-01 00:00:{int(r['ts'][17:19]) // 10 * 10:02d}"
            truth[(start, r["user"])] = truth.get((start, r["user"]), 0) + 1
    got: list[tuple[str, str, int]] = []

    def sink(batch: DataFrame, _: int) -> None:
        got.extend(tuple(r) for r in batch.selectExpr("CAST(window.start AS STRING)", "user", "count").collect())

    with session_conf(spark, {INTERVAL_KEY: "30s"}):
        q = (_suppressed_counts(spark, src).writeStream.outputMode("update").foreachBatch(sink)
             .option("checkpointLocation", str(tmp_path / "ckpt")).start())
        for i, rows in enumerate(files):
            (src / f"{i:03d}.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
            q.processAllAvailable()
        plan = q._jsq.explainInternal(False)  # what q.explain() prints
        q.stop()
    assert "emitCache" not in plan.replace("EmitCacheSkipped", "")
    assert "EmitCacheSkipped [the query ends in suppress" in plan
    assert len(truth) == 12  # 6 windows, each with events of both users
    assert sorted(got) == sorted((s, u, n) for (s, u), n in truth.items())
