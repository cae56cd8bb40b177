"""Write-behind record cache (issue 16, part 2): with spark.sluice.commit.interval.ms > 0 the caching
provider commits its delegate only when the interval is due, and logs each batch's changed rows
beside the store's checkpoint. Results, restarts, replays and the state reader stay exactly those of
the delegate alone; the metrics show the writes and commits the delegate no longer sees."""
from __future__ import annotations

import datetime as dt
import json
import os
import random
from pathlib import Path
from typing import Any, Callable

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import sluice
from support.inputs import FileFedQuery
from support.session import session_conf, sluice_session

CACHING = "sluice.cache.CachingStateStoreProvider"
PLAIN = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "in_memory_window": "sluice.windowstore.InMemoryWindowStoreProvider",
}
INTERVAL = "spark.sluice.commit.interval.ms"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
FORMAT = "spark.sql.streaming.stateStore.checkpointFormatVersion"
LOG_DIR = "_sluice_writebehind"
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


@pytest.fixture
def spark() -> SparkSession:
    # The running session when it has these settings (a test may have stopped it to start another).
    return sluice_session(statestore_cache_max_bytes=256 * 1024)


@pytest.fixture(params=["hdfs", "rocksdb"])
def delegate(request: pytest.FixtureRequest) -> str:
    return request.param


def _batches(seed: int, n: int, rows: int = 120, keys: int = 25) -> list[list[dict[str, Any]]]:
    """Batch i's events fall in [10 s * i, 10 s * i + 10 s): the 10 s watermark closes a window or so per batch."""
    rnd = random.Random(seed)
    return [[{"k": f"k{rnd.randrange(keys)}", "v": rnd.randrange(100),
              "ts": (T0 + dt.timedelta(seconds=10 * i + rnd.random() * 10)).isoformat()}
             for _ in range(rows)] for i in range(n)]


def _windowed(spark: SparkSession, path: Path) -> DataFrame:
    """Append-mode windowed count: point reads and writes, plus a full scan evicting closed windows."""
    return (spark.readStream.schema("k STRING, v LONG, ts TIMESTAMP").option("maxFilesPerTrigger", 1)
            .json(str(path)).withWatermark("ts", "10 seconds")
            .groupBy(F.window("ts", "10 seconds"), "k").agg(F.count("*").alias("n"), F.sum("v").alias("s")))


def _dedup(spark: SparkSession, path: Path) -> DataFrame:
    return (spark.readStream.schema("k STRING, v LONG, ts TIMESTAMP").option("maxFilesPerTrigger", 1)
            .json(str(path)).dropDuplicates(["k"]))


def _row(r: Any) -> tuple:
    return tuple(r.window.start.isoformat() if f == "window" else r[f] for f in r.__fields__)


class Query(FileFedQuery):
    """One query fed one file per micro-batch; rows kept per batch id (a replay overwrites its batch)."""

    def __init__(self, spark: SparkSession, root: Path, provider: str, delegate: str,
                 build: Callable[[SparkSession, Path], DataFrame], mode: str = "append"):
        super().__init__(spark, root)
        self.provider, self.delegate = provider, delegate
        self.build, self.mode = build, mode
        self.ckpt = root / "ckpt"
        self.by_batch: dict[int, list[tuple]] = {}

    def start(self, interval: str) -> None:
        def collect(df: DataFrame, batch_id: int) -> None:
            self.by_batch[batch_id] = sorted(_row(r) for r in df.collect())

        with session_conf(self.spark, {PROVIDER: self.provider, "spark.sluice.statestore.cache.delegate": self.delegate,
                                       INTERVAL: interval}):
            self.query = (self.build(self.spark, self.inputs).writeStream.foreachBatch(collect)
                          .outputMode(self.mode).option("checkpointLocation", str(self.ckpt)).start())

    @property
    def rows(self) -> list[tuple]:
        return sorted(r for rows in self.by_batch.values() for r in rows)

    def metric(self, name: str) -> list[int]:
        """Per-batch values of a custom metric of the first stateful operator, batches with input only."""
        return [p["stateOperators"][0]["customMetrics"].get(name, 0)
                for p in self.progress if p.get("stateOperators") and p["numInputRows"] > 0]

    def log_files(self) -> list[Path]:
        return sorted((self.ckpt / "state").glob(f"0/*/{LOG_DIR}/*.wb"))


def _run(spark: SparkSession, root: Path, provider: str, delegate: str, build, batches: list,
         intervals: list[str], mode: str = "append") -> Query:
    """Feeds `batches`, restarting the query (a new run: providers load from the checkpoint) with the
    next interval of `intervals` at evenly spaced points."""
    q = Query(spark, root, provider, delegate, build, mode)
    per = -(-len(batches) // len(intervals))
    for i, rows in enumerate(batches):
        if i % per == 0:
            if q.query is not None:
                q.stop()
            q.start(intervals[i // per])
        q.feed(rows)
    q.stop()
    return q


def test_windowed_append_exact_and_delegate_untouched(spark: SparkSession, tmp_path: Path, delegate: str) -> None:
    """Interval 1 h: results equal the delegate alone's, across a restart at a batch whose state lives
    in the log; the delegate is neither written nor committed; each batch has its log file."""
    batches = _batches(1, 6)
    plain = _run(spark, tmp_path / "plain", PLAIN[delegate], delegate, _windowed, batches, ["0"])
    cached = _run(spark, tmp_path / "cached", CACHING, delegate, _windowed, batches, ["1h", "1h"])
    assert len(plain.rows) > 40 and cached.rows == plain.rows
    assert len(set(cached.rows)) == len(cached.rows)  # each window and key once
    assert cached.metric("delegateCommits") == [0] * 6 and cached.metric("delegateWrites") == [0] * 6
    assert max(cached.metric("writeBehindRows")) > 0
    assert len(cached.log_files()) >= 2 * 6  # two partitions, one file per batch version


def test_interval_zero_commits_every_batch_and_window_store_is_never_held(
        spark: SparkSession, tmp_path: Path) -> None:
    """Without an interval, and for the window store delegate, the delegate commits every batch
    (one commit per partition) and no log file is written."""
    batches = _batches(2, 3)
    plain = _run(spark, tmp_path / "plain", PLAIN["hdfs"], "hdfs", _windowed, batches, ["0"])
    every = _run(spark, tmp_path / "every", CACHING, "hdfs", _windowed, batches, ["0"])
    window = _run(spark, tmp_path / "window", CACHING, "in_memory_window", _windowed, batches, ["1h"])
    for q in (every, window):
        assert q.rows == plain.rows
        assert q.metric("delegateCommits") == [2] * 3 and q.log_files() == []
        assert sum(q.metric("delegateWrites")) > 0


def test_interval_changed_across_restarts(spark: SparkSession, tmp_path: Path, delegate: str) -> None:
    """1 h -> 0 -> 1 h on one checkpoint: exact results; the 0 phase commits the delegate every batch
    (the first writes the logged rows into it), the 1 h phases never."""
    batches = _batches(3, 6)
    plain = _run(spark, tmp_path / "plain", PLAIN[delegate], delegate, _windowed, batches, ["0"])
    cached = _run(spark, tmp_path / "cached", CACHING, delegate, _windowed, batches, ["1h", "0", "1h"])
    assert cached.rows == plain.rows
    assert cached.metric("delegateCommits") == [0, 0, 2, 2, 0, 0]
    writes = cached.metric("delegateWrites")
    assert writes[0] == writes[1] == writes[4] == writes[5] == 0 and writes[2] > 0


def _state_rows(q: Query) -> dict[int, tuple[int, int, int]]:
    """Per batch id (no-data batches too, where the watermark evicts): Spark's state row metrics of
    the first stateful operator."""
    return {p["batchId"]: (op["numRowsTotal"], op["numRowsUpdated"], op["numRowsRemoved"])
            for p in q.progress if p.get("stateOperators") for op in p["stateOperators"][:1]}


@pytest.mark.parametrize("build", [_windowed, _dedup], ids=["windowed", "dedup"])
def test_state_row_metrics_equal_the_delegate_alones_while_rows_are_logged(
        spark: SparkSession, tmp_path: Path, delegate: str, build) -> None:
    """Spark's numRowsTotal, numRowsUpdated and numRowsRemoved, batch by batch, are the delegate
    alone's, while the delegate never commits (1 h) and across a restart that reloads logged rows;
    the windowed query removes rows (watermark eviction), the dedup query only adds them."""
    batches = _batches(6, 6, rows=80, keys=40)
    plain = _run(spark, tmp_path / "plain", PLAIN[delegate], delegate, build, batches, ["0"])
    held = _run(spark, tmp_path / "held", CACHING, delegate, build, batches, ["1h", "1h"])
    assert sum(held.metric("delegateCommits")) == 0  # every batch's rows stayed in the log
    expected = _state_rows(plain)
    assert len(expected) >= 6 and max(r[0] for r in expected.values()) > 0
    if build is _windowed:
        assert sum(r[2] for r in expected.values()) > 0  # rows were removed, not only added
    assert _state_rows(held) == expected


def test_dedup_exact_with_writes_coalesced(spark: SparkSession, tmp_path: Path, delegate: str) -> None:
    """dropDuplicates (point reads and writes only): the same rows as the delegate alone; the cache at
    interval 0 writes every new key to the delegate, at 1 h none."""
    batches = _batches(4, 4, rows=80, keys=120)
    plain = _run(spark, tmp_path / "plain", PLAIN[delegate], delegate, _dedup, batches, ["0"])
    every = _run(spark, tmp_path / "every", CACHING, delegate, _dedup, batches, ["0"])
    held = _run(spark, tmp_path / "held", CACHING, delegate, _dedup, batches, ["1h", "1h"])
    assert held.rows == every.rows == plain.rows and len({r[0] for r in held.rows}) == len(held.rows)
    assert sum(every.metric("delegateWrites")) == len(plain.rows)
    assert sum(held.metric("delegateWrites")) == 0 and sum(held.metric("delegateCommits")) == 0
    assert held.metric("writeBehindRows")[-1] == len(plain.rows)  # every key, logged once


def test_deleted_commit_replay_emits_the_same_rows(spark: SparkSession, tmp_path: Path, delegate: str) -> None:
    """Spark re-runs the last batch after its commit is deleted: it loads the previous batch's
    version (delegate + log) and emits exactly what it emitted the first time."""
    batches = _batches(5, 5)
    q = _run(spark, tmp_path, CACHING, delegate, _windowed, batches, ["1h"])
    first = dict(q.by_batch)
    last = max(b for b in first if first[b])  # the last batch that emitted rows
    for b in [b for b in first if b >= last]:
        (q.ckpt / "commits" / str(b)).unlink()
        (q.ckpt / "commits" / f".{b}.crc").unlink(missing_ok=True)
        del q.by_batch[b]
    q.start("1h")
    q.query.processAllAvailable()
    q.stop()
    assert first[last] and q.by_batch[last] == first[last]
    assert q.rows == sorted(r for rows in first.values() for r in rows)


def _state(spark: SparkSession, ckpt: Path, delegate: str, batch_id: int | None = None) -> list[str]:
    with session_conf(spark, {"spark.sluice.statestore.cache.delegate": delegate}):
        r = spark.read.format("statestore").option("path", str(ckpt))
        if batch_id is not None:
            r = r.option("batchId", batch_id)
        return sorted(json.dumps(row.asDict(recursive=True), default=str) for row in r.load().collect())


def test_state_reader_reads_batch_versions(spark: SparkSession, tmp_path: Path, delegate: str) -> None:
    """Spark's state reader on a write-behind checkpoint returns what it returns on the delegate
    alone's, at the last batch and at an earlier one (both held in the log)."""
    batches = _batches(6, 4, keys=10)
    plain = _run(spark, tmp_path / "plain", PLAIN[delegate], delegate, _dedup, batches, ["0"])
    cached = _run(spark, tmp_path / "cached", CACHING, delegate, _dedup, batches, ["1h"])
    assert cached.log_files()
    latest = _state(spark, cached.ckpt, delegate)
    assert len(latest) == 10 and latest == _state(spark, plain.ckpt, delegate)
    assert _state(spark, cached.ckpt, delegate, 1) == _state(spark, plain.ckpt, delegate, 1)


@pytest.mark.parametrize("delegate_name", ["hdfs", "rocksdb"])
def test_kill_at_a_held_batch_loses_nothing_and_emits_no_window_twice(
        spark: SparkSession, tmp_path: Path, delegate_name: str) -> None:
    """SIGKILL the whole process (driver JVM included) of a windowed append query whose delegate
    never committed (interval 1 h), then restart here: every window's final count arrives exactly
    once (the idempotent sink keyed by batch id absorbs the replayed batch)."""
    from support.cache_kill_child import windowed, windowed_sink
    from support.children import kill_after_batches

    src, ckpt, out = tmp_path / "in", tmp_path / "ckpt", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    batches = _batches(7, 8, rows=40, keys=6)
    for f, rows in enumerate(batches):
        (src / f"{f:03d}.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        os.utime(src / f"{f:03d}.json", (1_700_000_000 + f, 1_700_000_000 + f))  # the file source's order
    kill_after_batches("cache_kill_child.py", [str(src), str(ckpt), str(out), delegate_name, "windowed"],
                       out, batches=4)
    assert len(list(out.glob("*.json"))) < 8 + 2  # killed mid-stream
    assert list((ckpt / "state").glob(f"0/*/{LOG_DIR}/*.wb"))

    with session_conf(spark, {"spark.sql.streaming.stateStore.providerClass": CACHING,
                              "spark.sluice.statestore.cache.delegate": delegate_name, INTERVAL: "1h"}):
        q = (windowed(spark, str(src)).writeStream.outputMode("append").foreachBatch(windowed_sink(str(out)))
             .option("checkpointLocation", str(ckpt)).start())
        q.processAllAvailable()
        q.stop()

    got = sorted(tuple(r) for p in out.glob("*.json") for r in json.loads(p.read_text()))
    expected: dict[tuple, tuple[int, int]] = {}
    for b in batches:
        for r in b:
            ts = dt.datetime.fromisoformat(r["ts"])
            start = T0 + dt.timedelta(seconds=(ts - T0).total_seconds() // 10 * 10)
            n, s = expected.get((start.strftime("%Y-%m-%d %H:%M:%S"), r["k"]), (0, 0))
            expected[(start.strftime("%Y-%m-%d %H:%M:%S"), r["k"])] = (n + 1, s + r["v"])
    # append mode emits a window once the watermark (max event time - 10 s) passes its end: all but
    # the last two windows of the input
    closed = sorted((w, k, n, s) for (w, k), (n, s) in expected.items() if w < "2024-01-01 00:01:00")
    assert got == closed and len({(w, k) for w, k, _, _ in got}) == len(got)


def test_changed_rows_outgrowing_half_the_share_commit_the_delegate(
        spark: SparkSession, tmp_path: Path, delegate: str) -> None:
    """With 1 h interval but more changed rows than half the store's share (64 KiB here: 256 KiB
    per executor, 2 slots, halved for the emission cache), the delegate commits in the batch where
    they outgrow it and the log starts again from there; results stay exact across a restart."""
    rnd = random.Random(8)
    batches = [[{"k": f"key-{b}-{i:04d}", "v": rnd.randrange(100), "ts": T0.isoformat()} for i in range(300)]
               for b in range(6)]
    plain = _run(spark, tmp_path / "plain", PLAIN[delegate], delegate, _dedup, batches, ["0"])
    held = _run(spark, tmp_path / "held", CACHING, delegate, _dedup, batches, ["1h", "1h"])
    assert held.rows == plain.rows and len(held.rows) == 1800
    commits, logged = held.metric("delegateCommits"), held.metric("writeBehindRows")
    assert 0 in commits and max(commits) > 0  # some batches held, some committed
    for c, n in zip(commits, logged):
        if c == 2:  # both partitions committed: nothing left in their logs
            assert n == 0
    assert sum(held.metric("delegateWrites")) == sum(
        w for w, c in zip(held.metric("delegateWrites"), commits) if c > 0)  # only committing batches write


def test_checkpoint_format_v2_is_refused_at_session_start_naming_the_keys(
        spark: SparkSession, tmp_path: Path) -> None:
    """Write-behind numbers the delegate's versions itself, which checkpoint format v2's store
    checkpoint ids cannot follow: a session configured so fails to start, naming both keys, their
    values and what to set; a query that sets v2 in its session fails at its first batch with the
    same message. Last in the module: it stops the session the other tests share."""
    with session_conf(spark, {FORMAT: "2"}):
        q = Query(spark, tmp_path, CACHING, "rocksdb", _dedup)
        q.start("1h")
    with pytest.raises(Exception) as at_first_batch:
        q.feed(_batches(9, 1)[0])
    q.query.stop()

    with pytest.raises(sluice.SluiceConfError) as at_start:
        sluice_session(conf={FORMAT: "2"}, state_store_cache=True, commit_interval_ms="1h")
    message = str(at_start.value)
    assert message.startswith(f"{INTERVAL}=3600000 with {PROVIDER}={CACHING} needs {FORMAT}=1, got 2: ")
    assert message.endswith(f"Set {FORMAT}=1 (or unset it), or {INTERVAL}=0") and "\n" not in message
    assert SparkSession.getActiveSession() is None
    assert message in str(at_first_batch.value)
