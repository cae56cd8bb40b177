"""In-memory window store (KIP-428) as a Spark state store provider: every stateful operator the
HDFS-backed provider supports gives the same results on it, across a restart and a replayed batch;
retention, metrics and the Kafka-style supplier API."""
from __future__ import annotations

import json
import os
import random
import sys
import time
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupStateTimeout

import sluice
import support.session
from sluice import Stores
from sluice._conf import STATE_STORE_PROVIDERS
from support.session import BASE_CONF, fresh_builder, session_conf, stop_session

PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"
SCHEMA = "ts TIMESTAMP, key STRING, side STRING, v INT"
T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
# Retention long enough that nothing expires in the side-by-side tests.
SUPPLIER = Stores.in_memory_window_store(
    "ws", retention=timedelta(days=365), window_size=timedelta(seconds=10), grace=timedelta(seconds=5))
MODULE_CONF = {
    # Watermark-driven output only in data batches: deterministic per batch.
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    "spark.sql.streaming.stateStore.maintenanceInterval": "1s",
    "spark.sluice.windowstore.snapshot.interval": "2",
}


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    """A session built the way a user switches to the window store: one supplier.configure()."""
    stop_session()
    # Python workers (applyInPandasWithState) need this venv's pandas and pyarrow.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = fresh_builder().master("local[2]").appName("sluice-windowstore-tests")
    for k, v in {**BASE_CONF, **MODULE_CONF}.items():
        builder = builder.config(k, v)
    session = SUPPLIER.configure(builder).getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    support.session._current.update(key=("windowstore",), spark=session)
    yield session
    stop_session()


def _batches(n: int = 5, per_batch: int = 24, seed: int = 7) -> list[list[dict[str, Any]]]:
    """Events moving forward ~10s per batch, with some late ones and repeated keys/values."""
    rnd = random.Random(seed)
    out = []
    for b in range(n):
        rows = []
        for _ in range(per_batch):
            offset = b * 10 + rnd.randint(-12, 12)
            ts = T0 + timedelta(seconds=max(0, offset), milliseconds=rnd.randint(0, 999))
            rows.append({"ts": ts.isoformat().replace("+00:00", "Z"), "key": f"k{rnd.randint(0, 4)}",
                         "side": rnd.choice("LR"), "v": rnd.randint(0, 6)})
        out.append(rows)
    return out


@contextmanager
def _provider(spark: SparkSession, name: str) -> Iterator[None]:
    """Starts queries on the named provider (recorded in the checkpoint), then restores the
    session's own choice (the supplier's, from the builder)."""
    with session_conf(spark, {PROVIDER_KEY: STATE_STORE_PROVIDERS[name]}):
        yield


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    """Writes a batch file atomically (the file source ignores hidden files)."""
    tmp = path.with_name("." + path.name)
    tmp.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    tmp.rename(path)


class Run:
    """One provider's run of a query: outputs per batch id and each query run's last progress."""

    def __init__(self) -> None:
        self.results: dict[int, list[tuple]] = {}
        self.calls: dict[int, int] = {}
        self.progress: list[dict] = []


def _run(spark: SparkSession, tmp: Path, provider: str, build: Callable[[Callable[[], DataFrame]], DataFrame],
         mode: str, batches: list[list[dict[str, Any]]], restart_after: int = 2,
         before_restart: Callable[[Path], None] | None = None) -> Run:
    """Feeds one file per batch; stops and restarts on the checkpoint after `restart_after`
    batches; finally deletes the last commit so the restarted query replays the last batch."""
    src, ckpt = tmp / f"in-{provider}", tmp / f"ckpt-{provider}"
    src.mkdir()
    run = Run()

    def sink(df: DataFrame, batch_id: int) -> None:
        run.results[batch_id] = sorted(tuple(r) for r in df.collect())
        run.calls[batch_id] = run.calls.get(batch_id, 0) + 1

    def source() -> DataFrame:
        return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(src))

    def start() -> Any:
        with _provider(spark, provider):
            return (build(source).writeStream.outputMode(mode).foreachBatch(sink)
                    .option("checkpointLocation", str(ckpt)).start())

    def stop(q: Any) -> None:
        run.progress.append(q.lastProgress)
        q.stop()

    q = start()
    for i, rows in enumerate(batches):
        if i == restart_after:
            stop(q)
            if before_restart is not None:
                before_restart(ckpt)
            q = start()
        _write(src / f"{i:03d}.json", rows)
        q.processAllAvailable()
    stop(q)

    last = max(run.results)
    before = run.results[last]
    commit = ckpt / "commits" / str(last)
    commit.unlink()
    (ckpt / "commits" / f".{last}.crc").unlink(missing_ok=True)
    q = start()
    q.processAllAvailable()
    stop(q)
    assert run.calls[last] == 2, "the last batch was replayed"
    assert run.results[last] == before, "the replayed batch emits what it emitted the first time"
    return run


def _side_by_side(spark: SparkSession, tmp_path: Path, build: Callable, mode: str,
                  **kwargs: Any) -> tuple[Run, Run]:
    batches = _batches()
    hdfs = _run(spark, tmp_path, "hdfs", build, mode, batches, **kwargs)
    ws = _run(spark, tmp_path, "in_memory_window", build, mode, batches, **kwargs)
    assert any(hdfs.results.values()), "the query produced output"
    assert ws.results == hdfs.results
    return hdfs, ws


def _all_events() -> list[dict[str, Any]]:
    return [r for b in _batches() for r in b]


def _wait_for_snapshot(ckpt: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not list((ckpt / "state").rglob("*.wsnapshot")):
        assert time.monotonic() < deadline, "maintenance wrote no snapshot"
        time.sleep(0.2)


def _ws_custom_metrics(run: Run) -> dict[str, int]:
    ops = run.progress[-1]["stateOperators"]
    return ops[0]["customMetrics"]


# ---- every stateful operator, side by side with the HDFS-backed provider ----

def test_windowed_aggregation_append_with_snapshot_and_restart(spark: SparkSession, tmp_path: Path) -> None:
    def build(src: Callable[[], DataFrame]) -> DataFrame:
        return (src().withWatermark("ts", "5 seconds").groupBy(F.window("ts", "10 seconds"), "key")
                .count().select("window.start", "key", "count"))

    def snapshot_then_restart(ckpt: Path) -> None:
        if "in_memory" in ckpt.name:
            _wait_for_snapshot(ckpt)

    hdfs, ws = _side_by_side(spark, tmp_path, build, "append", before_restart=snapshot_then_restart)
    files = [p.name for p in (tmp_path / "ckpt-in_memory_window" / "state").rglob("*") if p.is_file()]
    assert any(f.endswith(".wdelta") for f in files) and any(f.endswith(".wsnapshot") for f in files)
    metrics = _ws_custom_metrics(ws)
    assert metrics["windowStoreSegments"] > 0 and metrics["windowStoreMemoryBytes"] > 0
    assert metrics["expiredWindowRecordDropTotal"] == 0
    assert "windowStoreSegments" not in _ws_custom_metrics(hdfs)


def test_sliding_window_update_without_watermark(spark: SparkSession, tmp_path: Path) -> None:
    def build(src: Callable[[], DataFrame]) -> DataFrame:
        return (src().groupBy(F.window("ts", "20 seconds", "10 seconds"), "key")
                .agg(F.sum("v").alias("s")).select("window.start", "key", "s"))

    _side_by_side(spark, tmp_path, build, "update")


def test_plain_aggregation_complete_matches_direct_computation(spark: SparkSession, tmp_path: Path) -> None:
    def build(src: Callable[[], DataFrame]) -> DataFrame:
        return src().groupBy("key").agg(F.sum("v").alias("s"), F.count("*").alias("n"))

    _, ws = _side_by_side(spark, tmp_path, build, "complete")
    expected: dict[str, list[int]] = {}
    for r in _all_events():
        expected.setdefault(r["key"], [0, 0])
        expected[r["key"]][0] += r["v"]
        expected[r["key"]][1] += 1
    assert ws.results[max(ws.results)] == sorted((k, s, n) for k, (s, n) in expected.items())


def test_drop_duplicates(spark: SparkSession, tmp_path: Path) -> None:
    def build(src: Callable[[], DataFrame]) -> DataFrame:
        return src().dropDuplicates(["key", "v"]).select("key", "v")

    _, ws = _side_by_side(spark, tmp_path, build, "append")
    emitted = [row for rows in ws.results.values() for row in rows]
    assert sorted(emitted) == sorted({(r["key"], r["v"]) for r in _all_events()})


def test_drop_duplicates_within_watermark(spark: SparkSession, tmp_path: Path) -> None:
    def build(src: Callable[[], DataFrame]) -> DataFrame:
        return src().withWatermark("ts", "10 seconds").dropDuplicatesWithinWatermark(["key"]).select("key", "ts")

    _side_by_side(spark, tmp_path, build, "append")


def test_session_windows(spark: SparkSession, tmp_path: Path) -> None:
    def build(src: Callable[[], DataFrame]) -> DataFrame:
        return (src().withWatermark("ts", "5 seconds").groupBy(F.session_window("ts", "4 seconds"), "key")
                .agg(F.count("*").alias("n"), F.sum("v").alias("s"))
                .select("session_window.start", "session_window.end", "key", "n", "s"))

    _side_by_side(spark, tmp_path, build, "append")


def test_stream_stream_left_outer_join(spark: SparkSession, tmp_path: Path) -> None:
    def build(src: Callable[[], DataFrame]) -> DataFrame:
        events = src()  # one source for both sides: both see the same files in each batch
        left = (events.where("side = 'L'").withWatermark("ts", "10 seconds")
                .select(F.col("key").alias("lk"), F.col("ts").alias("lts"), F.col("v").alias("lv")))
        right = (events.where("side = 'R'").withWatermark("ts", "10 seconds")
                 .select(F.col("key").alias("rk"), F.col("ts").alias("rts"), F.col("v").alias("rv")))
        cond = F.expr("lk = rk AND rts BETWEEN lts - INTERVAL 5 SECONDS AND lts + INTERVAL 5 SECONDS")
        return left.join(right, cond, "leftOuter")

    _side_by_side(spark, tmp_path, build, "append")


def test_windowed_stream_stream_join(spark: SparkSession, tmp_path: Path) -> None:
    def build(src: Callable[[], DataFrame]) -> DataFrame:
        events = src()
        left = (events.where("side = 'L'").withWatermark("ts", "10 seconds")
                .select("key", F.window("ts", "10 seconds").alias("window"), F.col("v").alias("lv")))
        right = (events.where("side = 'R'").withWatermark("ts", "10 seconds")
                 .select("key", F.window("ts", "10 seconds").alias("window"), F.col("v").alias("rv")))
        return left.join(right, ["key", "window"]).select("key", "window.start", "lv", "rv")

    _side_by_side(spark, tmp_path, build, "append")


def test_apply_in_pandas_with_state(spark: SparkSession, tmp_path: Path) -> None:
    import pandas as pd

    def count(key: tuple, pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        n, s = state.get if state.exists else (0, 0)
        for pdf in pdfs:
            n += len(pdf)
            s += int(pdf["v"].sum())
        state.update((n, s))
        yield pd.DataFrame({"key": [key[0]], "n": [n], "s": [s]})

    def build(src: Callable[[], DataFrame]) -> DataFrame:
        return src().groupBy("key").applyInPandasWithState(
            count, "key STRING, n LONG, s LONG", "n LONG, s LONG", "update", GroupStateTimeout.NoTimeout)

    _, ws = _side_by_side(spark, tmp_path, build, "update")
    totals: dict[str, int] = {}
    for r in _all_events():
        totals[r["key"]] = totals.get(r["key"], 0) + 1
    last_seen = {}
    for b in sorted(ws.results):
        for key, n, _ in ws.results[b]:
            last_seen[key] = n
    assert last_seen == totals


# ---- retention ----

def test_retention_expires_windows_and_counts_dropped_puts(spark: SparkSession, tmp_path: Path) -> None:
    """Retention 20s, no watermark: windows starting at or before stream time - 20s are dropped and
    a late record for one is not stored (counted); window-less state is unaffected."""
    def at(seconds: int, key: str = "a") -> dict[str, Any]:
        ts = (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")
        return {"ts": ts, "key": key, "side": "L", "v": 1}

    batches = [[at(1), at(2)], [at(12)], [at(45)], [at(3), at(46)]]
    # The session's provider is the supplier's; retention overridden for this session only.
    assert spark.conf.get(PROVIDER_KEY) == STATE_STORE_PROVIDERS["in_memory_window"]
    # Stream time is per store (partition), as per task in Kafka Streams; Spark partitions windowed
    # state by (window, key), so one partition keeps all windows of this test in one store.
    with session_conf(spark, {"spark.sluice.windowstore.retention": "20s", "spark.sql.shuffle.partitions": "1"}):
        src, ckpt = tmp_path / "in", tmp_path / "ckpt"
        src.mkdir()
        out: dict[int, list[tuple]] = {}

        def sink(df: DataFrame, batch_id: int) -> None:
            out[batch_id] = sorted(tuple(r) for r in df.collect())

        df = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(src))
              .groupBy(F.window("ts", "10 seconds"), "key").count().select("window.start", "count"))
        q = (df.writeStream.outputMode("update").foreachBatch(sink)
             .option("checkpointLocation", str(ckpt)).start())
        metrics = []
        for i, rows in enumerate(batches):
            _write(src / f"{i:03d}.json", rows)
            q.processAllAvailable()
            metrics.append(q.lastProgress["stateOperators"][0])
        q.stop()

    segs = [m["customMetrics"]["windowStoreSegments"] for m in metrics]
    drops = [m["customMetrics"]["expiredWindowRecordDropTotal"] for m in metrics]
    assert segs == [1, 2, 1, 1], "the 40s window expired the 0s and 10s windows (start <= 40s - 20s)"
    assert drops == [0, 0, 0, 1], "the late record for the expired 0s window was dropped"
    assert metrics[3]["numRowsTotal"] == 1
    # Spark still emits the late record's partial count (its state was gone), as without the store.
    assert (T0.replace(tzinfo=None), 1) in out[3]


# ---- API ----

def test_supplier_validation_uses_kafka_messages() -> None:
    m = timedelta(minutes=1)
    with pytest.raises(TypeError, match="name cannot be null"):
        Stores.in_memory_window_store(None, m, m, m)  # type: ignore[arg-type]
    for args, what in [((-m, m, m), "retentionPeriod"), ((m, -m, m), "windowSize"), ((m, m, -m), "gracePeriod")]:
        with pytest.raises(ValueError) as e:
            Stores.in_memory_window_store("s", *args)
        assert str(e.value) == f"{what} cannot be negative"
    with pytest.raises(ValueError) as e:
        Stores.in_memory_window_store("s", m, 2 * m, m)
    assert str(e.value) == ("The retention period of the window store s must be no smaller than its "
                            "window size. Got size=[PT2M], retention=[PT1M]")
    with pytest.raises(ValueError) as e:
        Stores.in_memory_window_store("s", timedelta(hours=1), m, timedelta(hours=1, seconds=30.5))
    assert str(e.value) == ("The grace period of the window store s must not exceed its retention "
                            "period. Got grace period=[PT1H30.5S], retention=[PT1H]")
    with pytest.raises(TypeError, match="timedelta"):
        Stores.in_memory_window_store("s", 60, m, m)  # type: ignore[arg-type]


def test_supplier_and_configure_select_the_provider() -> None:
    b = fresh_builder()
    SUPPLIER.configure(b)
    opts = b._options
    assert opts[PROVIDER_KEY] == "sluice.windowstore.InMemoryWindowStoreProvider"
    assert opts["spark.sluice.windowstore.retention"] == str(365 * 86400 * 1000)
    # window size and grace only bound the retention, checked when the supplier is built
    assert not any(k.startswith("spark.sluice.windowstore.") and k.split(".")[-1] in ("size", "grace") for k in opts)
    assert sluice.jar_path() in opts["spark.jars"]
    for name, cls in [("in_memory_window", "sluice.windowstore.InMemoryWindowStoreProvider"),
                      ("hdfs", "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"),
                      ("rocksdb", "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")]:
        assert sluice.configure(fresh_builder(), state_store=name)._options[PROVIDER_KEY] == cls
    with pytest.raises(ValueError, match="spark.sql.streaming.stateStore.providerClass.*one of rocksdb, hdfs, in_memory_window"):
        sluice.configure(fresh_builder(), state_store="memory")


def _first_batch_failure(spark: SparkSession, tmp_path: Path, key: str, value: str) -> str:
    """The error of a query's first batch (one aggregation over the window store) with `key` set
    to `value` in the session."""
    with session_conf(spark, {key: value}):
        src = tmp_path / "in"
        src.mkdir()
        (src / "0.json").write_text(json.dumps(_batches(1)[0][0]) + "\n")
        q = (spark.readStream.schema(SCHEMA).json(str(src)).groupBy("key").count().writeStream
             .outputMode("update").format("noop").option("checkpointLocation", str(tmp_path / "c")).start())
        with pytest.raises(Exception) as e:
            q.processAllAvailable()
        q.stop()
        return str(e.value)


def test_bad_window_store_conf_is_rejected_with_key_and_value(spark: SparkSession, tmp_path: Path) -> None:
    failure = _first_batch_failure(spark, tmp_path, "spark.sluice.windowstore.retention", "soon")
    assert "Invalid value 'soon' for spark.sluice.windowstore.retention" in failure


def test_suppress_until_window_closes(spark: SparkSession, tmp_path: Path) -> None:
    """sluice's suppress keeps its buffer in the session's state store: same final results."""
    from sluice import BufferConfig, Suppressed, suppress

    def build(src: Callable[[], DataFrame]) -> DataFrame:
        counts = src().withWatermark("ts", "5 seconds").groupBy(F.window("ts", "10 seconds"), "key").count()
        return (suppress(counts, Suppressed.until_window_closes(BufferConfig.unbounded()))
                .select("window.start", "key", "count"))

    # The suppress operator (not fused into the aggregation): its buffer is what this test is about.
    with session_conf(spark, {"spark.sluice.suppress.fused": "false"}):
        _, ws = _side_by_side(spark, tmp_path, build, "update")
    state = tmp_path / "ckpt-in_memory_window" / "state"
    suppress_ops = [d for d in state.iterdir() if d.name.isdigit() and int(d.name) >= 1000]
    assert suppress_ops and any(f.name.endswith(".wdelta") for d in suppress_ops for f in d.rglob("*")), \
        "suppress's buffer lives in the window store"
    finals = [row for rows in ws.results.values() for row in rows]
    assert len(finals) == len({(start, key) for start, key, _ in finals}), "one final result per window"


def test_checkpoint_format_v2_is_refused_at_session_start_naming_the_key(spark: SparkSession, tmp_path: Path) -> None:
    """The window store names its files by version alone, without format v2's store checkpoint
    ids: a session with v2 fails to start, naming the key, the value and what to set; a query that
    sets v2 in its session fails when its store opens, with the same message. Last in the module:
    it stops the module's session."""
    key = "spark.sql.streaming.stateStore.checkpointFormatVersion"
    at_open = _first_batch_failure(spark, tmp_path, key, "2")

    stop_session()
    builder = fresh_builder().master("local[2]").appName("sluice-windowstore-v2")
    for k, v in {**BASE_CONF, key: "2"}.items():
        builder = builder.config(k, v)
    with pytest.raises(sluice.SluiceConfError) as at_start:
        SUPPLIER.configure(builder).getOrCreate()
    message = str(at_start.value)
    assert message == (f"sluice.windowstore.InMemoryWindowStoreProvider needs {key}=1, got 2: it names its files "
                       f"by version alone, without the store checkpoint ids of format 2. Set {key}=1 (or unset it)")
    assert SparkSession.getActiveSession() is None
    assert message in at_open
