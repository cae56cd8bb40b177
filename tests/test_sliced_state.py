"""Sliced state (spark.sluice.window.slicing.state): a sliding-window aggregation that emits final
results keeps one state row per slice of event time and key, and forms each window from its slices
when the watermark closes it. The layout is pinned in the checkpoint.

The scenarios, input and model are test_slicing's (one JSON file per micro-batch, final results
against a model of windows and the watermark, restarts that leave the last batch uncommitted).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from conftest import session_conf
from sluice._conf import spec, state_store_providers
from test_slicing import (BATCHES, SIZE, SLIDE, Run, aggregates, final, json_lines, killed_and_restarted,  # noqa: F401
                          model, store, switched)

KEY = "spark.sluice.window.slicing.state"
MARKER = "_sluice_sliced_state"
INTERVAL_KEY = "spark.sluice.commit.interval.ms"


def state_side(plan: str) -> str:
    """How the aggregation keeps its state: `sliced` (per slice) or `windows` (Spark's save, per window)."""
    sliced, spark = "SlicedWindow" in plan, "StateStoreSave" in plan
    assert sliced != spark, plan
    return "sliced" if sliced else "windows"


class SlicedStateRun(Run):
    """A Run whose start sets sliced state (on, or off if `started_off` flips it) and, with
    `map_side_slicing`, window slicing too."""

    def __init__(self, *args, started_off: bool = False, map_side_slicing: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.started_off, self.map_side_slicing = started_off, map_side_slicing

    def start(self, on: bool) -> None:
        with session_conf(self.spark, {KEY: str(on != self.started_off).lower()}):
            super().start(self.map_side_slicing)


def sliding(df: DataFrame, size: int = SIZE, slide: int = SLIDE, user: Optional[Column] = None) -> DataFrame:
    return aggregates(df, F.window("ts", f"{size} seconds", f"{slide} seconds"), user)


@pytest.mark.parametrize("store,mode,map_side_slicing,key", [
    ("hdfs", "append", False, "column"), ("rocksdb", "final", False, "column"),
    ("in_memory_window", "final", False, "expression"), ("cache", "final", False, "column"),
    ("rocksdb", "append", True, "expression")], indirect=["store"])
def test_sliced_state_restarted_with_the_setting_off_keeps_its_layout_and_gives_the_final_results(
        spark: SparkSession, tmp_path: Path, store: str, mode: str, map_side_slicing: bool, key: str) -> None:
    """Started sliced; restarted with the setting off, then on again: the checkpoint keeps its sliced
    state, each restart replays the batch the stop left uncommitted, and the replay emits what the
    batch emitted the first time. Final results as the model gives them, in Spark's append mode and
    under sluice's fused final results; the key a column or an expression of one (Spark projects it
    between the windows and the aggregation, as in Nexmark q5)."""
    user = None if key == "column" else F.lower("user")
    build = (lambda df: sliding(df, user=user)) if mode == "append" else (lambda df: final(sliding(df, user=user)))
    run = SlicedStateRun(spark, tmp_path, build, "append" if mode == "append" else "update",
                      map_side_slicing=map_side_slicing)
    plans = switched(run, state_side)
    assert plans == ["sliced"] * 3, plans
    assert (run.ckpt / "state" / "0" / MARKER).is_file()
    expected = model()
    assert len(expected) >= 12 and len({s for s, _ in expected}) >= 6
    assert run.emitted() == expected
    assert len(run.replayed) == 2, sorted(run.replayed)
    assert {b: run.first[b] for b in run.replayed} == run.replayed


class BoundRun(SlicedStateRun):
    """A SlicedStateRun whose source takes no file count per micro-batch but the input bound, set below
    the smallest file's bytes: each micro-batch reads one file, however many were fed together."""

    def source_options(self) -> dict[str, str]:
        smallest = min(len(json_lines(events).encode()) for events in BATCHES)
        return {"sluice.maxBytesPerTrigger": str(smallest - 1)}


@pytest.mark.parametrize("delegate", ["hdfs", "in_memory_window"])
def test_sliced_state_under_the_record_cache_a_commit_interval_and_the_input_bound(
        spark: SparkSession, tmp_path: Path, delegate: str) -> None:
    """Sliced state behind the record cache with an hour's commit interval (write-behind: the cache
    writes its delegate once an hour; and the emission cache's interval), fed two files at a time that
    the input bound splits into a micro-batch each; stopped with its last batch uncommitted and
    restarted with a 1 ms interval (whatever was held is due): the model's final results, each once,
    and the replayed batch emits what it emitted the first time."""
    confs = {"spark.sql.streaming.stateStore.providerClass": spec()["caching_provider"],
             "spark.sluice.statestore.cache.delegate": delegate}
    run = BoundRun(spark, tmp_path, lambda df: final(sliding(df)), "update")
    sides, rows = [], []
    try:
        for interval, batches in (("1h", BATCHES[:4]), ("1ms", BATCHES[4:])):
            with session_conf(spark, {**confs, INTERVAL_KEY: interval}):
                run.start(True)
            for i in range(0, len(batches), 2):
                run.feed(*batches[i:i + 2])
            sides.append(state_side(run.plan()))
            rows.append([p["numInputRows"] for p in run.query.recentProgress if p["numInputRows"]])
            run.stop(forget_last_commit=interval == "1h")
    finally:
        if run.query is not None:
            run.stop()
    assert sides == ["sliced"] * 2
    # one file per micro-batch (the last batch before the stop, the one replayed, read no file: the
    # watermark's batch after file 3)
    sizes = [len(events) for events in BATCHES]
    assert rows == [sizes[:4], sizes[4:]], rows
    assert run.emitted() == model(feeds=[2, 2, 2, 1])
    assert len(run.replayed) == 1 and {b: run.first[b] for b in run.replayed} == run.replayed


def test_state_rows_are_per_slice_not_per_window(spark: SparkSession, tmp_path: Path) -> None:
    """One key's events in one slice: Spark keeps a state row per window they are in (SIZE / SLIDE),
    sliced state one row, and reports the smaller store (Spark's progress, operator by name)."""
    totals, memory = {}, {}
    for on in (False, True):
        run = SlicedStateRun(spark, tmp_path / str(on), lambda df: final(sliding(df)), "update")
        run.start(on)
        try:
            run.feed([(t, "a", 1) for t in (41, 45, 52)])  # one slice, [40, 60); watermark 42
            # progress of the batches that ran (an idle trigger reports no state operator)
            states = [p["stateOperators"][0] for p in run.query.recentProgress if p["stateOperators"]]
            totals[on] = (states[-1]["operatorName"], states[-1]["numRowsTotal"],
                          sum(s["numRowsUpdated"] for s in states))
            memory[on] = states[-1]["memoryUsedBytes"]
        finally:
            run.stop()
    assert totals == {False: ("stateStoreSave", SIZE // SLIDE, SIZE // SLIDE),
                      True: ("slicedWindowAggregate", 1, 1)}, totals
    assert 0 < memory[True] < memory[False], memory


def test_checkpoint_started_with_sparks_layout_keeps_it(spark: SparkSession, tmp_path: Path) -> None:
    """Started with the setting off, restarted with it on, then off: Spark's layout throughout,
    the model's final results, and no marker."""
    run = SlicedStateRun(spark, tmp_path, lambda df: final(sliding(df)), "update", started_off=True)
    assert switched(run, state_side) == ["windows"] * 3
    assert not (run.ckpt / "state" / "0" / MARKER).exists()
    assert run.emitted() == model()
    assert {b: run.first[b] for b in run.replayed} == run.replayed


def test_sliced_checkpoint_restarted_with_windows_it_cannot_slice_fails_naming_why(
        spark: SparkSession, tmp_path: Path) -> None:
    """The same state schema, but a slide that does not divide the size: the sliced state cannot be
    read as Spark's, so the restart fails and says why, and the checkpoint is left as it was."""
    run = SlicedStateRun(spark, tmp_path, lambda df: final(sliding(df)), "update")
    run.start(True)
    run.feed(BATCHES[0])
    run.stop()
    commits = sorted(p.name for p in (run.ckpt / "commits").iterdir())
    run.build = lambda df: final(sliding(df, SIZE, 25))
    run.start(True)
    with pytest.raises(StreamingQueryException, match=r"keeps the state of its aggregation .* per slice.*cannot run "
                                                      r"sliced now: it is not a sliding-window aggregation"):
        run.feed(BATCHES[1])
    run.query = None
    assert sorted(p.name for p in (run.ckpt / "commits").iterdir()) == commits


@pytest.mark.parametrize("shape", ["tumbling", "window_only", "collect_list"])
def test_aggregations_sliced_state_cannot_serve_keep_sparks_layout(
        spark: SparkSession, tmp_path: Path, shape: str) -> None:
    """Tumbling windows, a window without keys, and an aggregate with no merge expression keep
    Spark's state, with the setting on, and no marker is written."""
    window = F.window("ts", f"{SIZE} seconds", f"{SLIDE} seconds")
    if shape == "tumbling":
        build = lambda df: final(aggregates(df, F.window("ts", f"{SIZE} seconds")))  # noqa: E731
    elif shape == "window_only":
        build = lambda df: final(df.withWatermark("ts", "10 seconds").groupBy(window)  # noqa: E731
                                 .agg(F.count("*").alias("n"), F.sum("v").alias("total"), F.max("v").alias("top"),
                                      F.lit("*").alias("user")))
    else:
        build = lambda df: final(df.withWatermark("ts", "10 seconds").groupBy(window, "user")  # noqa: E731
                                 .agg(F.count("*").alias("n"), F.sum("v").alias("total"), F.max("v").alias("top"),
                                      F.collect_list("v").alias("vs")))
    run = SlicedStateRun(spark, tmp_path, build, "update")
    run.start(True)
    try:
        run.feed(BATCHES[0])
        assert state_side(run.plan()) == "windows"
    finally:
        run.stop()
    assert not (run.ckpt / "state" / "0" / MARKER).exists()


def test_killed_sliced_state_query_restarted_emits_each_final_result_exactly_once(
        spark: SparkSession, tmp_path: Path) -> None:
    """SIGKILL a sliced-state final-results query's whole process (driver JVM included) mid-stream and
    restart it here on its checkpoint with the setting off (the checkpoint keeps the layout): with a
    sink idempotent per batch id, every final result of the hour-long windows sliding by 20 minutes
    arrives exactly once, with its count."""
    ckpt = killed_and_restarted(spark, tmp_path, state_store_providers()["rocksdb"], [f"{KEY}=true"], {KEY: "false"})
    assert (ckpt / "state" / "0" / MARKER).is_file()


def test_marker_names_what_it_pins(spark: SparkSession, tmp_path: Path) -> None:
    run = SlicedStateRun(spark, tmp_path, lambda df: final(sliding(df)), "update")
    run.start(True)
    try:
        run.feed(BATCHES[0])
    finally:
        run.stop()
    assert re.search(r"operator 0 is kept per slice", (run.ckpt / "state" / "0" / MARKER).read_text())


def test_explain_of_a_streaming_dataframe_shows_the_sliced_plan_and_writes_nothing(
        spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Spark plans `explain()` of a streaming DataFrame with a checkpoint named "<unknown>": the plan
    is what a new checkpoint gets, and no marker is written (relative to the JVM's directory)."""
    (tmp_path / "in").mkdir()
    events = spark.readStream.schema("ts timestamp, user string, v long").json(str(tmp_path / "in"))
    jvm_dir = Path(spark.sparkContext._jvm.System.getProperty("user.dir"))
    plans = {}
    for on in (True, False):
        with session_conf(spark, {KEY: str(on).lower()}):
            sliding(events).explain()
        plans[on] = state_side(capsys.readouterr().out)
    assert plans == {True: "sliced", False: "windows"}
    assert not (jvm_dir / "<unknown>").exists()
