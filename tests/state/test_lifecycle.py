"""Moving a checkpoint onto or off a sluice state store provider never happens silently.

Spark records the state store provider in a checkpoint's offset log and, when a query restarts, runs
it on the recorded provider whatever its session asks for, logging only a warning. So a windowed
count started on Spark's HDFS-backed provider and restarted with ``sluice.configure(...,
state_store_cache=True)`` would keep running on HDFS while the session reports the record cache, and
the other way round. sluice refuses such a restart in ``start()``, in one line naming the
checkpoint's provider, the session's, and how to go on; the checkpoint is untouched and restarts on
its own provider with nothing lost. Restarts on the same provider, changes between Spark's own
providers and queries without state are left as they were. Sessions and their settings come from
``sluice.configure``."""
from __future__ import annotations

import json
import random
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import IllegalArgumentException, StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import sluice
from sluice import _handles
from sluice._conf import contract, spec, state_store_providers
from support.session import session_conf, sluice_session, stop_session

KEY = contract()["provider_class_key"]
DELEGATE_KEY = spec()["prefix"] + "statestore.cache.delegate"
INTERVAL_KEY = spec()["prefix"] + "commit.interval.ms"
CACHING = spec()["caching_provider"]
CLASSES = state_store_providers()  # hdfs, rocksdb, in_memory_window

# Each side: the options of sluice.configure that choose it.
SIDES: dict[str, dict[str, Any]] = {
    "hdfs": {"state_store": "hdfs"},
    "rocksdb": {"state_store": "rocksdb"},
    "window store": {"state_store": "in_memory_window"},
    "record cache over hdfs": {"state_store_cache": True, "statestore_cache_delegate": "hdfs"},
    "record cache over rocksdb": {"state_store_cache": True, "statestore_cache_delegate": "rocksdb"},
    # write-behind: the delegate commits once an hour; the emission cache holds results as long
    "record cache over hdfs with write-behind": {"state_store_cache": True, "statestore_cache_delegate": "hdfs",
                                                 "commit_interval_ms": "1h"},
}
PROVIDER = {name: CACHING if o.get("state_store_cache") else CLASSES[o["state_store"]] for name, o in SIDES.items()}
DELEGATE = {name: o.get("statestore_cache_delegate") for name, o in SIDES.items()}

# (the checkpoint's side, the restart's side): onto sluice, then off it
# Onto each sluice provider from each of Spark's, and off each back to Spark's.
MOVES = [
    ("hdfs", "record cache over hdfs"),
    ("rocksdb", "record cache over rocksdb"),
    ("hdfs", "window store"),
    ("rocksdb", "window store"),
    ("record cache over hdfs", "hdfs"),
    ("record cache over rocksdb", "rocksdb"),
    ("window store", "hdfs"),
    ("record cache over hdfs with write-behind", "hdfs"),
]

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


def configured(**options: Any) -> dict[str, str]:
    """The session settings sluice.configure sets for `options` (the provider and sluice's keys),
    with every other key either side sets back at its default."""
    settings = _handles.builder_options(sluice.configure(SparkSession.builder, **options))
    chosen = {k: str(v) for k, v in settings.items() if k == KEY or k.startswith(spec()["prefix"])}
    defaults = {DELEGATE_KEY: "rocksdb", INTERVAL_KEY: "0"}
    return {**defaults, **chosen}


def own(side: str) -> dict[str, str]:
    """The settings that restart a checkpoint of `side` on its own provider; with write-behind, the
    interval back at 0: the first batch forwards what the emission cache held, the record cache's
    delegate commits what was written behind, and the output is Spark's from then on."""
    options = dict(SIDES[side])
    if "commit_interval_ms" in options:
        options["commit_interval_ms"] = "0"
    return configured(**options)


def _batches(n: int = 3, rows: int = 40, seed: int = 11) -> list[list[dict[str, Any]]]:
    """Events moving forward 20 s per batch over 30 s each, so windows span batches; keys repeat."""
    rnd = random.Random(seed)
    return [[{"ts": (T0 + timedelta(seconds=b * 20 + rnd.randrange(30))).isoformat().replace("+00:00", "Z"),
              "k": f"k{rnd.randrange(5)}"} for _ in range(rows)] for b in range(n)]


BATCHES = _batches()


def model(batches: list[list[dict[str, Any]]]) -> dict[tuple[str, str], int]:
    """The count per 10-second window and key over every batch."""
    counts: Counter = Counter()
    for rows in batches:
        for r in rows:
            ts = datetime.fromisoformat(r["ts"].replace("Z", "+00:00"))
            start = ts - timedelta(seconds=ts.second % 10)
            counts[(start.strftime("%Y-%m-%d %H:%M:%S"), r["k"])] += 1
    return dict(counts)


class Run:
    """A windowed count (update mode) on one checkpoint, fed one file per micro-batch; the rows each
    batch emitted, in order."""

    def __init__(self, spark: SparkSession, root: Path) -> None:
        self.spark, self.src, self.ckpt = spark, root / "in", root / "ckpt"
        self.src.mkdir(parents=True)
        self.files = 0
        self.rows: list[tuple[str, str, int]] = []

    def query(self) -> DataFrame:
        return (self.spark.readStream.schema("ts TIMESTAMP, k STRING").option("maxFilesPerTrigger", 1)
                .json(str(self.src)).withWatermark("ts", "1 hour")
                .groupBy(F.window("ts", "10 seconds"), "k").count())

    def start(self, settings: dict[str, str], df: DataFrame | None = None) -> Any:
        def collect(batch: DataFrame, batch_id: int) -> None:
            if "window" in batch.columns:
                batch = batch.select(F.col("window.start").cast("string"), "k", "count")
            self.rows.extend((r[0], r[1], r[2]) for r in batch.collect())

        with session_conf(self.spark, settings):
            return ((df if df is not None else self.query()).writeStream.outputMode("update").foreachBatch(collect)
                    .option("checkpointLocation", str(self.ckpt)).start())

    def write(self, rows: list[dict[str, Any]]) -> None:
        tmp = self.src / f".part-{self.files:05d}.json"  # the file source skips hidden files
        tmp.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        tmp.rename(self.src / f"part-{self.files:05d}.json")
        self.files += 1

    def run(self, settings: dict[str, str], *batches: list[dict[str, Any]]) -> None:
        """Starts on the checkpoint, processes what waits and then each of `batches`, and stops."""
        q = self.start(settings)
        try:
            q.processAllAvailable()
            for rows in batches:
                self.write(rows)
                q.processAllAvailable()
            if batches and settings.get(INTERVAL_KEY, "0") not in ("0", ""):
                # a batch without rows after the interval: what the emission cache held is due
                time.sleep(0.01)
                self.write([])
                q.processAllAvailable()
        finally:
            q.stop()

    def latest(self) -> dict[tuple[str, str], int]:
        return {(w, k): n for w, k, n in self.rows}  # update mode: a key's last row is its count

    def logs(self) -> dict[str, list[str]]:
        """The checkpoint's offset and commit log files."""
        return {d: sorted(p.name for p in (self.ckpt / d).iterdir()) for d in ("offsets", "commits")}


def _refused_start(run: Run, settings: dict[str, str]) -> str:
    with pytest.raises(IllegalArgumentException) as info:
        q = run.start(settings)
        q.stop()  # not reached when refused
    # the exception's message; pyspark appends the JVM's stack trace where its setting asks for it
    return str(info.value).split("\n\nJVM stacktrace:", 1)[0]


@pytest.mark.parametrize("before,after", MOVES, ids=[f"{a} -> {b}" for a, b in MOVES])
def test_a_restart_on_another_provider_fails_at_start_naming_both(spark: SparkSession, tmp_path: Path,
                                                                 before: str, after: str) -> None:
    run = Run(spark, tmp_path)
    run.run(configured(**SIDES[before]), BATCHES[0])
    run.write(BATCHES[1])  # waiting: a query that started would take it on the checkpoint's provider
    logs = run.logs()

    message = _refused_start(run, configured(**SIDES[after]))
    assert "\n" not in message, message
    was = f"{KEY}={PROVIDER[before]}" + (f" over {DELEGATE_KEY}={DELEGATE[before]}" if DELEGATE[before] else "")
    assert f"written with the state store provider {was}, " in message, message
    asked = PROVIDER[after] + (f" over {DELEGATE_KEY}={DELEGATE[after]}" if DELEGATE[after] else "")
    assert f"this session asks for {asked}: " in message, message
    assert f"run the query on {PROVIDER[before]}, not on {PROVIDER[after]}" in message, message
    assert f"set {KEY}={PROVIDER[before]}" in message and "start the query on a new checkpoint" in message, message
    assert str(run.ckpt.name) in message
    assert run.logs() == logs  # refused before the query ran: no batch planned or committed

    # its own provider again: the waiting batch and one more; nothing lost, nothing twice
    run.run(own(before), BATCHES[2])
    assert run.latest() == model(BATCHES)
    assert len(run.logs()["commits"]) >= 3


@pytest.mark.parametrize("delegate", ["hdfs", "rocksdb"])
@pytest.mark.parametrize("interval", ["0", "1ms"])
def test_write_behind_restarted_at_another_interval_loses_nothing(spark: SparkSession, tmp_path: Path,
                                                                  delegate: str, interval: str) -> None:
    """A checkpoint whose record cache held rows only in its write-behind files (interval 1 h: the
    delegate never committed them) restarts with the interval at 0 (the delegate commits every batch)
    or 1 ms: the first batch takes the logged rows into the delegate, and every count goes on from them."""
    options = {"state_store_cache": True, "statestore_cache_delegate": delegate}
    run = Run(spark, tmp_path)
    run.run(configured(**options, commit_interval_ms="1h"), BATCHES[0], BATCHES[1])
    run.run(configured(**options, commit_interval_ms=interval), BATCHES[2])
    assert run.latest() == model(BATCHES)


@pytest.mark.parametrize("side", ["hdfs", "window store", "record cache over rocksdb",
                                  "record cache over hdfs with write-behind"])
def test_a_restart_on_the_same_provider_keeps_working(spark: SparkSession, tmp_path: Path, side: str) -> None:
    run = Run(spark, tmp_path)
    run.run(configured(**SIDES[side]), BATCHES[0])
    run.run(own(side), BATCHES[1], BATCHES[2])
    assert run.latest() == model(BATCHES)


def test_a_restart_on_another_delegate_of_the_record_cache_fails_naming_both(spark: SparkSession,
                                                                            tmp_path: Path) -> None:
    """The provider is the same (the record cache); its delegate, which Spark does not record, is
    recorded beside each store and checked when the store opens: the first batch fails, naming both."""
    run = Run(spark, tmp_path)
    run.run(configured(**SIDES["record cache over hdfs"]), BATCHES[0])
    run.write(BATCHES[1])
    q = run.start(configured(**SIDES["record cache over rocksdb"]))
    try:
        with pytest.raises(StreamingQueryException) as info:
            q.processAllAvailable()
    finally:
        q.stop()
    message = str(info.value)
    assert f"{DELEGATE_KEY} is 'rocksdb'" in message and f"written with {DELEGATE_KEY}='hdfs'" in message
    run.run(own("record cache over hdfs"), BATCHES[2])
    assert run.latest() == model(BATCHES)


def test_a_change_between_sparks_own_providers_is_left_to_spark(spark: SparkSession, tmp_path: Path) -> None:
    """HDFS-backed to RocksDB: Spark's own behaviour (the checkpoint's provider goes on), not sluice's to refuse."""
    run = Run(spark, tmp_path)
    run.run(configured(**SIDES["hdfs"]), BATCHES[0])
    run.run(configured(**SIDES["rocksdb"]), BATCHES[1], BATCHES[2])
    assert run.latest() == model(BATCHES)


def test_a_query_without_state_is_left_alone(spark: SparkSession, tmp_path: Path) -> None:
    """No store reads what a provider wrote: a stateless query restarts on any provider."""
    run = Run(spark, tmp_path)
    plain = lambda: (run.spark.readStream.schema("ts TIMESTAMP, k STRING").option("maxFilesPerTrigger", 1)
                     .json(str(run.src)).select(F.col("ts").cast("string"), "k", F.lit(1).alias("n")))
    for side, rows in (("record cache over hdfs", BATCHES[0]), ("hdfs", BATCHES[1]), ("window store", BATCHES[2])):
        q = run.start(configured(**SIDES[side]), plain())
        try:
            run.write(rows)
            q.processAllAvailable()
        finally:
            q.stop()
    assert len(run.rows) == sum(len(b) for b in BATCHES)


def test_the_record_cache_turned_on_by_configure_on_an_hdfs_checkpoint_fails_at_start(tmp_path: Path) -> None:
    """The case as a user meets it: sessions built by sluice.configure, the provider in the builder.
    Last in the module: it replaces the module's session."""
    try:
        run = Run(sluice_session(state_store="hdfs"), tmp_path)
        run.run({}, BATCHES[0])
        run.write(BATCHES[1])
        run.spark = sluice_session(state_store_cache=True, statestore_cache_delegate="hdfs")
        assert run.spark.conf.get(KEY) == CACHING  # what the session reports
        message = _refused_start(run, {})
        assert "\n" not in message
        assert f"written with the state store provider {KEY}={CLASSES['hdfs']}, " in message, message
        assert f"this session asks for {CACHING} over {DELEGATE_KEY}=hdfs: " in message, message
        run.spark = sluice_session(state_store="hdfs")
        run.run({}, BATCHES[2])
        assert run.latest() == model(BATCHES)
    finally:
        stop_session()
