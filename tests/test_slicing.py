"""Window slicing (spark.sluice.window.slicing): a sliding-window aggregation's map side aggregates
each slice of event time once per key, then forms the windows from the slices.

Each scenario feeds one JSON file per micro-batch (maxFilesPerTrigger=1) and records each batch's
rows by batch id. Expected results come from a small model of sliding windows and the watermark
written here; the plan's map side (below the aggregation's exchange) shows whether it was sliced.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from conftest import session_conf
from sluice import BufferConfig, Suppressed, suppress
from sluice._conf import spec, state_store_providers

# dev/test: run on every supported Spark minor
pytestmark = pytest.mark.every_minor

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
SLICING_KEY = "spark.sluice.window.slicing"
DELAY = 10  # watermark delay, seconds
SIZE = 60   # window size, seconds
SLIDE = 20

# Events (seconds after T0, user, v) per micro-batch: several per slice and user, out of order, late
# events for windows already closed, negative values (so max and sum are not the count's shape).
BATCHES = [
    [(5, "a", 3), (50, "b", -2), (20, "a", 7), (21, "a", 1), (6, "a", 4), (55, "b", 9)],
    [(65, "a", 2), (30, "b", 5), (75, "c", -7), (79, "c", 8), (66, "a", 6)],       # watermark 45 -> 69
    [(10, "a", 1), (61, "b", 4), (125, "a", 3), (90, "c", 2), (62, "b", -1)],      # (10, a) late everywhere
    [(100, "b", 5), (119, "a", 2), (185, "b", 3), (101, "b", 6), (118, "a", -4)],
    [(121, "c", 1), (55, "a", 8), (170, "a", 5), (240, "c", 2), (171, "a", 9)],    # (55, a) late
    [(230, "a", 4), (199, "b", -3), (175, "b", 7), (231, "a", 1)],                 # (175, b): in [140, 200) only
    [(400, "z", 0)],                                                                 # closes everything before 390
]


def ts(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S")


def json_lines(events: list[tuple]) -> str:
    """Events (seconds after T0, user, v) as the JSON lines of an input file."""
    return "".join(json.dumps({"ts": ts(t), "user": u, "v": v}) + "\n" for t, u, v in events)


def result_rows(batch: DataFrame) -> list[tuple]:
    """A batch's (window start in seconds after T0, user, n, total, top) rows, in its order."""
    start = F.col("window.start").cast("long") - int(T0.timestamp())
    return [tuple(r) for r in batch.select(start, "user", "n", "total", "top").collect()]


def windows_of(t: int, size: int, slide: int) -> list[int]:
    """Starts of the windows of length `size` every `slide` seconds that hold time t."""
    last = (t // slide) * slide
    return [s for s in (last - i * slide for i in range(math.ceil(size / slide))) if s <= t < s + size]


def model(size: int = SIZE, slide: int = SLIDE, feeds: Optional[list[int]] = None) -> dict[tuple[int, str], tuple[int, int, int]]:
    """Final results, (count, sum, max) per window start and user: the events that were not late
    when they arrived; a window is emitted once the watermark reaches its end. `feeds`: how many of
    BATCHES were written at once (default one at a time); the query reads one per micro-batch and,
    after each feed, runs a batch without data that moves the watermark on. As in Spark, a micro-batch
    drops an event as late by the watermark of the micro-batch before it (its watermark for late
    events), so two batches read back to back drop by the same watermark."""
    wm = last = 0  # the watermark the next micro-batch runs with; that of the last one run
    values: dict[tuple[int, str], list[int]] = {}
    first = 0
    for n in feeds or [1] * len(BATCHES):
        for batch in BATCHES[first:first + n]:
            for t, user, v in batch:
                for s in windows_of(t, size, slide):
                    if s + size > last:
                        values.setdefault((s, user), []).append(v)
            last, wm = wm, max(wm, max(t for t, _, _ in batch) - DELAY)
        last, first = wm, first + n
    return {k: (len(vs), sum(vs), max(vs)) for k, vs in values.items() if k[0] + size <= wm}


def map_side(plan: str) -> list[str]:
    """The map side of the aggregation, top down, from its physical plan: each hash aggregation
    (`partial` or `merge`) and Expand below the first exchange."""
    below = plan.split("Exchange", 1)[1]
    return [agg or "Expand" for agg, _ in
            re.findall(r"HashAggregate\(keys=\[[^\]]*\], functions=\[(partial|merge)_|(Expand) \[", below)]


SLICED = ["merge", "Expand", "partial"]
UNSLICED = ["partial", "Expand"]


def aggregates(df: DataFrame, window: Column, user: Optional[Column] = None) -> DataFrame:
    """Count, sum and max per window and user; `user` may be an expression of the user (Spark then
    computes it in a projection between the windows and the aggregation)."""
    return (df.withWatermark("ts", f"{DELAY} seconds").groupBy(window, (F.col("user") if user is None else user).alias("user"))
            .agg(F.count("*").alias("n"), F.sum("v").alias("total"), F.max("v").alias("top")))


class Run:
    """One query over its own input folder and checkpoint, fed one file per micro-batch; the sink
    keeps every batch's rows by batch id, and what a batch emitted the first time it ran."""

    def __init__(self, spark: SparkSession, root: Path, build: Callable[[DataFrame], DataFrame], mode: str) -> None:
        self.spark, self.build, self.mode = spark, build, mode
        self.src, self.ckpt = root / "in", root / "ckpt"
        self.src.mkdir(parents=True)
        self.files = 0
        self.first: dict[int, list[tuple]] = {}
        self.replayed: dict[int, list[tuple]] = {}
        self.query: Any = None

    def source_options(self) -> dict[str, str]:
        """How the file source takes its input: one file per micro-batch."""
        return {"maxFilesPerTrigger": "1"}

    def start(self, slicing: bool) -> None:
        def sink(batch: DataFrame, batch_id: int) -> None:
            (self.replayed if batch_id in self.first else self.first)[batch_id] = sorted(result_rows(batch))

        with session_conf(self.spark, {SLICING_KEY: str(slicing).lower()}):
            events = (self.spark.readStream.schema("ts timestamp, user string, v long")
                      .options(**self.source_options()).json(str(self.src)))
            self.query = (self.build(events).writeStream.outputMode(self.mode).foreachBatch(sink)
                          .option("checkpointLocation", str(self.ckpt)).start())

    def feed(self, *batches: list[tuple]) -> None:
        """Writes a file of each batch's events, in order, then waits until the query has read them."""
        for events in batches:
            tmp = self.src / f".{self.files:05d}.tmp"
            tmp.write_text(json_lines(events))
            os.utime(tmp, (1_700_000_000 + self.files,) * 2)  # the file source takes files in this order
            tmp.rename(self.src / f"{self.files:05d}.json")
            self.files += 1
        self.query.processAllAvailable()

    def plan(self) -> str:
        return self.query._jsq.explainInternal(False)

    def stop(self, forget_last_commit: bool = False) -> None:
        """Stops the query; `forget_last_commit`: as if killed before its last batch committed, so
        the restarted query runs that batch again."""
        last = self.query.lastProgress["batchId"]
        self.query.stop()
        self.query = None
        if forget_last_commit:
            (self.ckpt / "commits" / str(last)).unlink()
            for crc in (self.ckpt / "commits").glob(f".{last}.crc"):
                crc.unlink()

    def emitted(self) -> dict[tuple[int, str], tuple[int, int, int]]:
        out: dict[tuple[int, str], tuple[int, int, int]] = {}
        for rows in self.first.values():
            for s, u, n, total, top in rows:
                assert (s, u) not in out, f"window {s} of {u} emitted twice"
                out[(s, u)] = (n, total, top)
        return out


class SwitchedRun(Run):
    """A Run whose start sets another plan rewrite's boolean setting, `key`, instead of window slicing's."""

    def __init__(self, spark: SparkSession, root: Path, build: Callable[[DataFrame], DataFrame], mode: str,
                 key: str) -> None:
        super().__init__(spark, root, build, mode)
        self.key = key

    def start(self, on: bool) -> None:
        with session_conf(self.spark, {self.key: str(on).lower()}):
            super().start(False)


def switched(run: Run, plan_of: Callable[[str], Any]) -> list[Any]:
    """Feeds BATCHES to `run` with its feature on for three batches, off after a restart, on again
    after another; each stop leaves its last batch uncommitted, so the restart replays it under the
    other setting. Returns `plan_of` each segment's physical plan."""
    plans = []
    try:
        for segment, (on, batches) in enumerate([(True, BATCHES[:3]), (False, BATCHES[3:5]), (True, BATCHES[5:])]):
            run.start(on)
            for events in batches:
                run.feed(events)
            plans.append(plan_of(run.plan()))
            if segment < 2:
                run.stop(forget_last_commit=True)
    finally:
        if run.query is not None:
            run.stop()
    return plans


def fed_sliced(run: Run) -> str:
    """Feeds BATCHES to `run` with slicing on, stops it, and returns its last physical plan."""
    try:
        run.start(True)
        for events in BATCHES:
            run.feed(events)
        return run.plan()
    finally:
        run.stop()


def final(df: DataFrame) -> DataFrame:
    return suppress(df, Suppressed.until_window_closes(BufferConfig.unbounded()))


@pytest.fixture
def store(request: pytest.FixtureRequest, spark: SparkSession) -> Any:
    # "cache": sluice's record cache in front of its default delegate (RocksDB)
    providers = {**state_store_providers(), "cache": spec()["caching_provider"]}
    with session_conf(spark, {"spark.sql.streaming.stateStore.providerClass": providers[request.param]}):
        yield request.param


@pytest.mark.parametrize("store,mode", [("hdfs", "append"), ("rocksdb", "final"), ("in_memory_window", "final"),
                                        ("cache", "final")],
                         indirect=["store"])
def test_sliced_windows_restarted_with_and_without_slicing_give_the_final_results(
        spark: SparkSession, tmp_path: Path, store: str, mode: str) -> None:
    """Slicing on for two batches, off after a restart, on again after another: the state written
    either way is read the other way, each restart replays the batch the stop left uncommitted with
    the other setting, and the replay emits what the batch emitted the first time."""
    window = F.window("ts", f"{SIZE} seconds", f"{SLIDE} seconds")
    if mode == "append":
        run = Run(spark, tmp_path, lambda df: aggregates(df, window), "append")
    else:  # sluice's final results: suppress(until_window_closes) on an update-mode aggregation
        run = Run(spark, tmp_path, lambda df: final(aggregates(df, window)), "update")
    plans = switched(run, map_side)
    assert plans == [SLICED, UNSLICED, SLICED], plans
    expected = model()
    assert len(expected) >= 12 and len({s for s, _ in expected}) >= 6
    assert run.emitted() == expected
    assert len(run.replayed) == 2, sorted(run.replayed)
    assert {b: run.first[b] for b in run.replayed} == run.replayed


def test_grouping_by_an_expression_is_sliced(spark: SparkSession, tmp_path: Path) -> None:
    """A key computed from the row (as Nexmark q5 groups by `bid.auction`): Spark projects it between
    the windows and the partial aggregation, and the map side is still sliced."""
    window = F.window("ts", f"{SIZE} seconds", f"{SLIDE} seconds")
    run = Run(spark, tmp_path, lambda df: final(aggregates(df, window, F.lower("user"))), "update")
    plan = fed_sliced(run)
    assert "_groupingexpression" in plan and map_side(plan) == SLICED, plan
    assert run.emitted() == model()


@pytest.mark.parametrize("shape", ["slide_not_dividing_size", "tumbling", "window_read_by_an_aggregate"])
def test_aggregations_slicing_cannot_serve_keep_their_plan_and_results(
        spark: SparkSession, tmp_path: Path, shape: str) -> None:
    size, slide = {"slide_not_dividing_size": (SIZE, 25), "tumbling": (SIZE, SIZE)}.get(shape, (SIZE, SLIDE))
    window = F.window("ts", f"{size} seconds", f"{slide} seconds")

    def build(df: DataFrame) -> DataFrame:
        agg = aggregates(df, window)
        if shape != "window_read_by_an_aggregate":
            return agg
        # an aggregate of the window column itself sees each row's own window, which slicing would not give it
        return (df.withWatermark("ts", f"{DELAY} seconds").groupBy(window, "user")
                .agg(F.count("*").alias("n"), F.sum("v").alias("total"), F.max("v").alias("top"),
                     F.max(F.col("window.end")).alias("end")).where(F.col("end") == F.col("window.end")).drop("end"))

    run = Run(spark, tmp_path, build, "append")
    plan = fed_sliced(run)
    assert map_side(plan) == (["partial"] if shape == "tumbling" else UNSLICED), plan
    assert run.emitted() == model(size, slide)


def test_killed_sliced_query_restarted_emits_each_final_result_exactly_once(spark: SparkSession, tmp_path: Path) -> None:
    """SIGKILL a sliced final-results query's whole process (driver JVM included) mid-stream, restart
    it here on its checkpoint, sliced: with a sink idempotent per batch id, every final result of the
    hour-long windows sliding by 20 minutes arrives exactly once, with its count."""
    killed_and_restarted(spark, tmp_path, state_store_providers()["in_memory_window"], [], {SLICING_KEY: "true"})


def killed_and_restarted(spark: SparkSession, tmp_path: Path, provider: str, child_settings: list[str],
                         restart_settings: dict[str, str]) -> Path:
    """Hour-long windows sliding by 20 minutes, their final results: the query runs sliced in a child
    process (with `child_settings`, key=value) SIGKILLed mid-stream, then is restarted here on its
    checkpoint with `restart_settings`. Asserts that every final result arrived exactly once, with its
    count; returns the checkpoint."""
    from conftest import drain_to_files, kill_after_batches, write_hourly_files
    from suppress_kill_child import file_sink, final_results

    src, ckpt, out = tmp_path / "in", tmp_path / "ckpt", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    hours = 8
    write_hourly_files(src, hours, ts)
    kill_after_batches("suppress_kill_child.py", [str(src), str(ckpt), str(out), provider, "20 minutes", *child_settings],
                       out, batches=4)
    assert len(list(out.glob("*.json"))) < 2 * hours  # killed mid-stream, not after the end

    drain_to_files(spark, final_results(spark, str(src), "20 minutes"), file_sink(str(out)), ckpt,
                   {"spark.sql.streaming.stateStore.providerClass": provider, **restart_settings})

    got: Counter = Counter()
    for path in sorted(out.glob("*.json")):
        for r in json.load(open(path)):
            start = datetime.fromisoformat(r["start"]).replace(tzinfo=timezone.utc)
            got[(int((start - T0).total_seconds()), r["user"], r["count"])] += 1
    # write_hourly_files: hour h holds users a, b, c, a (the first 2 + h % 3) at 15, 16, 17, 18 minutes
    events = [(h * 3600 + 900 + i * 60, user) for h in range(hours) for i, user in enumerate(["a", "b", "c", "a"][: 2 + h % 3])]
    watermark = max(t for t, _ in events) - 600
    windows = Counter((s, user) for t, user in events for s in windows_of(t, 3600, 1200))
    expected = Counter({(s, user, n): 1 for (s, user), n in windows.items() if s + 3600 <= watermark})
    assert len(expected) >= 3 * (hours - 2) and got == expected
    return ckpt


@pytest.mark.parametrize("time_type,offset", [("timestamp", 0), ("timestamp_ntz", 7)])
def test_batch_query_sliced_gives_the_rows_of_the_unsliced_plan(spark: SparkSession, tmp_path: Path,
                                                                time_type: str, offset: int) -> None:
    """A batch (not streaming) sliding-window aggregation is sliced too, with the same rows: either
    timestamp type, windows starting `offset` seconds past the slide, functions of every kind Spark
    runs as a hash aggregation (approx_count_distinct's buffer is filled by code, not expressions)."""
    path = tmp_path / "events.json"
    path.write_text(json_lines([e for b in BATCHES for e in b]))
    events = spark.read.schema(f"ts {time_type}, user string, v long").json(str(path))
    epoch = F.lit(T0.replace(tzinfo=None)).cast(time_type)
    start = (F.col("window.start").cast("timestamp").cast("long") - epoch.cast("timestamp").cast("long")).alias("start")
    window = F.window("ts", f"{SIZE} seconds", f"{SLIDE} seconds", f"{offset} seconds")
    results, plans = {}, {}
    for slicing in (False, True):
        with session_conf(spark, {SLICING_KEY: str(slicing).lower()}):
            df = (events.groupBy(window, "user")
                  .agg(F.count("*").alias("n"), F.sum("v"), F.max("v"), F.avg("v"), F.min("ts").cast("string"),
                       F.approx_count_distinct("v"))
                  .select(start, "user", "n", "sum(v)", "max(v)", "avg(v)", "CAST(min(ts) AS STRING)",
                          "approx_count_distinct(v)"))
            results[slicing] = sorted(tuple(r) for r in df.collect())
            # adaptive execution plans each stage as it runs: the plan it ran is its final plan
            plan = df._jdf.queryExecution().executedPlan().toString()
            plans[slicing] = map_side(plan.split("== Final Plan ==")[-1].split("== Initial Plan ==")[0])
    assert plans == {False: UNSLICED, True: SLICED}, plans
    every = Counter((s + offset, u) for b in BATCHES for t, u, _ in b for s in windows_of(t - offset, SIZE, SLIDE))
    assert results[True] == results[False] and {(r[0], r[1]): r[2] for r in results[True]} == dict(every)
