"""Spark's state data source on sluice's providers: `format("statestore")` and
`format("state-metadata")` return, for the same input, the same rows on every sluice provider as on
Spark's HDFS-backed one (at the last batch and at an earlier one), rows held only in the record
cache's write-behind files included, with the reading session at sluice's defaults (no provider, no
delegate set), as a user inspecting a checkpoint has it.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from support.session import session_conf

pytestmark = pytest.mark.every_minor

HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
CACHING = "sluice.cache.CachingStateStoreProvider"
# name -> the writing session's settings
WRITERS: dict[str, dict[str, str]] = {
    "hdfs": {"spark.sql.streaming.stateStore.providerClass": HDFS},
    "rocksdb": {"spark.sql.streaming.stateStore.providerClass":
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"},
    "window_store": {"spark.sql.streaming.stateStore.providerClass": "sluice.windowstore.InMemoryWindowStoreProvider"},
    **{f"cache_{d}_{i}": {"spark.sql.streaming.stateStore.providerClass": CACHING,
                          "spark.sluice.statestore.cache.delegate": d, "spark.sluice.commit.interval.ms": i}
       for d in ("hdfs", "rocksdb") for i in ("0", "1h")},
}
# RocksDB keeps a change log per version only with changelog checkpointing, which its change feed reads.
CHANGELOG = {"spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true"}
WRITERS["rocksdb_changelog"] = {**WRITERS["rocksdb"], **CHANGELOG}
WRITERS["cache_rocksdb_changelog_0"] = {**WRITERS["cache_rocksdb_0"], **CHANGELOG}


def write_input(src: Path) -> None:
    src.mkdir(parents=True)
    for f in range(4):  # one file per batch, minute f, keys k0..k4
        rows = [{"ts": f"2024-01-01 00:0{f}:{s:02d}", "k": f"k{s % 5}"} for s in range(0, 60, 7)]
        (src / f"{f}.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        os.utime(src / f"{f}.json", (1_700_000_000 + 10 * f,) * 2)  # the file source takes them in this order


def run(spark: SparkSession, src: Path, ckpt: Path, settings: dict[str, str]) -> None:
    with session_conf(spark, settings):
        events = spark.readStream.schema("ts timestamp, k string").option("maxFilesPerTrigger", 1).json(str(src))
        counts = events.withWatermark("ts", "1 minute").groupBy(F.window("ts", "1 minute"), "k").count()
        q = (counts.writeStream.outputMode("append").format("noop").option("checkpointLocation", str(ckpt))
             .start())
        q.processAllAvailable()
        q.stop()


def state(spark: SparkSession, ckpt: Path, batch_id: int | None = None) -> list[str]:
    reader = spark.read.format("statestore")
    if batch_id is not None:
        reader = reader.option("batchId", batch_id)
    return sorted(json.dumps(r.asDict(recursive=True), default=str) for r in reader.load(str(ckpt)).collect())


def metadata(spark: SparkSession, ckpt: Path) -> list[tuple[Any, ...]]:
    return sorted((r.operatorId, r.operatorName, r.stateStoreName, r.numPartitions, r.minBatchId, r.maxBatchId)
                  for r in spark.read.format("state-metadata").load(str(ckpt)).collect())


def change_feed(spark: SparkSession, ckpt: Path) -> list[str]:
    reader = spark.read.format("statestore").option("readChangeFeed", True).option("changeStartBatchId", 0)
    return sorted(json.dumps(r.asDict(recursive=True), default=str) for r in reader.load(str(ckpt)).collect())


def dropped_late(feed: list[str]) -> set[tuple[int, str]]:
    """(batch, key) of the keys a batch put and deleted in the same batch."""
    kinds: dict[tuple[int, str], set[str]] = {}
    for r in map(json.loads, feed):
        kinds.setdefault((r["batch_id"], json.dumps(r["key"])), set()).add(r["change_type"])
    return {k for k, v in kinds.items() if v == {"update", "delete"}}


@pytest.fixture(scope="module")
def checkpoints(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("state-reader")
    write_input(root / "in")
    out = {}
    for name, settings in WRITERS.items():
        run(spark, root / "in", root / name, settings)
        out[name] = root / name
    return out


@pytest.mark.parametrize("writer", sorted(set(WRITERS) - {"hdfs", "rocksdb_changelog"}))
def test_the_state_reader_returns_what_it_returns_on_sparks_provider(spark: SparkSession,
                                                                     checkpoints: dict[str, Path],
                                                                     writer: str) -> None:
    ckpt, spark_own = checkpoints[writer], checkpoints["hdfs"]
    latest = state(spark, ckpt)
    assert latest and latest == state(spark, spark_own)
    assert state(spark, ckpt, 1) == state(spark, spark_own, 1)  # an earlier batch: the log's rows on write-behind
    assert metadata(spark, ckpt) == metadata(spark, spark_own)
    if writer.endswith("_1h"):  # rows held only in the write-behind files
        assert list(ckpt.glob("state/0/*/_sluice_writebehind/*.wb"))


def test_a_reading_session_naming_another_delegate_fails_naming_both(spark: SparkSession,
                                                                     checkpoints: dict[str, Path]) -> None:
    with session_conf(spark, {"spark.sluice.statestore.cache.delegate": "rocksdb"}):
        with pytest.raises(Exception) as failure:
            state(spark, checkpoints["cache_hdfs_0"])
    message = str(failure.value)
    assert "spark.sluice.statestore.cache.delegate is 'rocksdb'" in message
    assert "written with spark.sluice.statestore.cache.delegate='hdfs'" in message


def test_a_query_writing_with_the_default_delegate_is_still_refused(spark: SparkSession, tmp_path: Path,
                                                                    checkpoints: dict[str, Path]) -> None:
    """Reading adopts the store's delegate; writing does not: a query restarted on an `hdfs`
    checkpoint without naming the delegate fails naming both, and the checkpoint is left as it was."""
    import shutil

    from pyspark.errors import StreamingQueryException

    ckpt = tmp_path / "ckpt"
    shutil.copytree(checkpoints["cache_hdfs_0"], ckpt)
    before = state(spark, ckpt)
    src = checkpoints["hdfs"].parent / "in"  # the source's log names its files by path
    (src / "4.json").write_text(json.dumps({"ts": "2024-01-01 00:09:00", "k": "k9"}) + "\n")
    with pytest.raises(StreamingQueryException) as failure:
        run(spark, src, ckpt, {"spark.sql.streaming.stateStore.providerClass": CACHING})
    message = str(failure.value)
    assert "spark.sluice.statestore.cache.delegate is 'rocksdb'" in message
    assert "written with spark.sluice.statestore.cache.delegate='hdfs'" in message
    assert state(spark, ckpt) == before


def test_the_state_reader_reads_suppress_buffer(spark: SparkSession, tmp_path: Path) -> None:
    """suppress's operator, listed by `state-metadata`, is read by `statestore` with its operator id:
    one row per held (window, key), its buffer time the window's end."""
    from datetime import timedelta

    from sluice import BufferConfig, Suppressed, suppress

    src, ckpt = tmp_path / "in", tmp_path / "ckpt"
    write_input(src)
    events = spark.readStream.schema("ts timestamp, k string").option("maxFilesPerTrigger", 1).json(str(src))
    counts = events.withWatermark("ts", "10 minutes").groupBy(F.window("ts", "1 minute"), "k").count()
    held = suppress(counts, Suppressed.until_window_closes(BufferConfig.unbounded(), grace=timedelta(0)))
    q = held.writeStream.outputMode("update").format("noop").option("checkpointLocation", str(ckpt)).start()
    q.processAllAvailable()
    q.stop()
    ops = {r.operatorName: r.operatorId for r in spark.read.format("state-metadata").load(str(ckpt)).collect()}
    rows = spark.read.format("statestore").option("operatorId", ops["suppress"]).load(str(ckpt)).collect()
    # stream time 03:56 after the last file: minutes 0-2 closed (grace 0), minute 3's keys held
    last_minute = Counter(f"k{s % 5}" for s in range(0, 60, 7))  # write_input's file 3
    assert sorted((r.key.key.k, r.value.row["count"]) for r in rows) == sorted(last_minute.items())
    assert {r.key.key.window.start.minute for r in rows} == {3}
    assert {r.value.bufferTime for r in rows} == {int(r.key.key.window.end.timestamp() * 1000) for r in rows}


@pytest.mark.parametrize("writer,spark_own", [("cache_hdfs_0", "hdfs"), ("cache_rocksdb_changelog_0", "rocksdb_changelog"),
                                              ("window_store", "hdfs")])
def test_the_change_feed_is_the_one_of_sparks_provider(spark: SparkSession, checkpoints: dict[str, Path],
                                                       writer: str, spark_own: str) -> None:
    """Spark's change feed (`readChangeFeed`) reads the same changes, every put and delete per batch,
    as on Spark's own provider: the record cache without write-behind through its delegate (each
    batch committed to it as that batch's version), the window store from its deltas (a window a
    batch emptied, one record there, read as a delete of each key it held)."""
    feed, own = change_feed(spark, checkpoints[writer]), change_feed(spark, checkpoints[spark_own])
    if writer == "window_store":
        # The window store drops a put into a window that has expired (KIP-428's late records); Spark's
        # provider puts it and removes it in the same batch. Those pairs are all that may differ (how
        # many there are depends on the order the file source takes the input's files in).
        transient = dropped_late(own)
        assert not dropped_late(feed)
        own = [r for r in own if (json.loads(r)["batch_id"], json.dumps(json.loads(r)["key"])) not in transient]
    assert feed == own
    kinds = Counter(json.loads(r)["change_type"] for r in feed)
    assert kinds["update"] > 0 and kinds["delete"] > 0  # windows counted, then evicted at the watermark


@pytest.mark.parametrize("writer", ["cache_hdfs_1h", "cache_rocksdb_1h"])
def test_the_change_feed_of_a_write_behind_store_is_refused_naming_why(spark: SparkSession,
                                                                        checkpoints: dict[str, Path],
                                                                        writer: str) -> None:
    """With write-behind the delegate holds several batches' changes in one version: a feed read
    from it would not be per batch, so it is refused in one line pointing at the per-batch reader."""
    for option, value in (("readChangeFeed", True), ("snapshotStartBatchId", 0)):
        reader = spark.read.format("statestore").option(option, value)
        reader = reader.option(*(("changeStartBatchId", 0) if option == "readChangeFeed" else ("snapshotPartitionId", 0)))
        with pytest.raises(Exception) as failure:
            reader.load(str(checkpoints[writer])).collect()
        line = next((x for x in str(failure.value).splitlines() if f"option {option} cannot read" in x), None)
        assert line is not None, str(failure.value)
        assert "has used write-behind" in line and "_sluice_writebehind exists" in line
        assert 'format("statestore") and batchId instead' in line
