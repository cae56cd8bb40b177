"""State merged per row (spark.sluice.aggregate.state.merge): a streaming aggregation merges each
key's restored state into the batch's aggregate as the restore hands the rows over, instead of in a
second hash aggregation over every key of the batch.

The scenarios and input are test_slicing's (one JSON file per micro-batch) on tumbling windows: final
results against its model, across restarts that switch the setting and replay a batch; running
results in update mode and complete mode, batch by batch, against the same query without it.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from test_slicing import BATCHES, DELAY, SIZE, SwitchedRun, aggregates, final, model, store, switched  # noqa: F401 (store: a fixture)

KEY = "spark.sluice.aggregate.state.merge"


def merge_side(plan: str) -> str:
    """How the restored state is merged: `per row` (sluice's StateMergeExec) or `hash` (Spark's)."""
    assert "StateStoreRestore" in plan, plan
    return "per row" if "StateMerge" in plan else "hash"


@pytest.mark.parametrize("store,mode", [("hdfs", "append"), ("rocksdb", "final"), ("in_memory_window", "final"),
                                        ("cache", "final")], indirect=["store"])
def test_state_merged_per_row_restarted_on_and_off_gives_the_final_results(
        spark: SparkSession, tmp_path: Path, store: str, mode: str) -> None:
    """On for three batches, off after a restart, on again after another; each restart replays the
    batch the stop left uncommitted under the other setting, and the replay emits what it emitted."""
    window = F.window("ts", f"{SIZE} seconds")
    if mode == "append":
        run = SwitchedRun(spark, tmp_path, lambda df: aggregates(df, window), "append", KEY)
    else:
        run = SwitchedRun(spark, tmp_path, lambda df: final(aggregates(df, window)), "update", KEY)
    assert switched(run, merge_side) == ["per row", "hash", "per row"]
    expected = model(SIZE, SIZE)
    assert len(expected) >= 8
    assert run.emitted() == expected
    assert len(run.replayed) == 2 and {b: run.first[b] for b in run.replayed} == run.replayed


def batch_by_batch(spark: SparkSession, root: Path, build, mode: str, on: bool) -> tuple[dict, list, str]:
    """Every micro-batch's rows of `build` over BATCHES (one file each), with a restart after the
    third batch; and each batch's state rows (total, updated) as the progress reports them."""
    run = SwitchedRun(spark, root, build, mode, KEY)
    progress = []
    try:
        run.start(on)
        for i, events in enumerate(BATCHES):
            if i == 3:
                progress += run.query.recentProgress
                run.stop()
                run.start(on)
            run.feed(events)
        plan = run.plan()
        progress += run.query.recentProgress
    finally:
        if run.query is not None:
            run.stop()
    states = [(p["batchId"], p["stateOperators"][0]["numRowsTotal"], p["stateOperators"][0]["numRowsUpdated"])
              for p in progress if p["numInputRows"] > 0]
    return run.first, states, plan


@pytest.mark.parametrize("store", ["hdfs", "rocksdb", "in_memory_window", "cache"], indirect=True)
@pytest.mark.parametrize("mode", ["update", "complete"])
def test_running_results_and_state_rows_are_those_of_spark_batch_by_batch(
        spark: SparkSession, tmp_path: Path, store: str, mode: str) -> None:
    """Update and complete mode emit state as it is merged, so every batch shows the merge: with the
    setting on, each batch's rows and the state's row counts are those of Spark's plan."""
    def build(df: DataFrame) -> DataFrame:
        return aggregates(df, F.window("ts", f"{SIZE} seconds"))
    on, on_states, on_plan = batch_by_batch(spark, tmp_path / "on", build, mode, True)
    off, off_states, off_plan = batch_by_batch(spark, tmp_path / "off", build, mode, False)
    assert (merge_side(on_plan), merge_side(off_plan)) == ("per row", "hash")
    assert len(on) >= len(BATCHES) and on == off  # with the batches without data the watermark brings
    assert sum(len(rows) for rows in on.values()) >= 15
    assert len(on_states) == len(BATCHES) and on_states == off_states


def test_aggregations_it_cannot_serve_keep_spark_plan_and_results(spark: SparkSession, tmp_path: Path) -> None:
    """A global aggregation (no keys: the restore emits the stored row alone on an empty batch) and
    collect_list (an imperative function, whose merge is no expression) keep Spark's merge."""
    def global_count(df: DataFrame) -> DataFrame:
        return df.groupBy().agg(F.count("*").alias("n"), F.sum("v").alias("total"), F.max("v").alias("top")) \
            .select(F.struct(F.lit(0).cast("timestamp").alias("start")).alias("window"), F.lit("all").alias("user"),
                    "n", "total", "top")

    def collected(df: DataFrame) -> DataFrame:
        return (df.withWatermark("ts", f"{DELAY} seconds").groupBy(F.window("ts", f"{SIZE} seconds"), "user")
                .agg(F.count("*").alias("n"), F.sum("v").alias("total"), F.array_max(F.collect_list("v")).alias("top")))

    for name, build, mode in [("global", global_count, "complete"), ("collect_list", collected, "update")]:
        on, _, on_plan = batch_by_batch(spark, tmp_path / f"{name}-on", build, mode, True)
        off, _, _ = batch_by_batch(spark, tmp_path / f"{name}-off", build, mode, False)
        assert merge_side(on_plan) == "hash", name
        assert len(on) >= len(BATCHES) and on == off, name
