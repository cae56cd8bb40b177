"""Partial aggregation by hash (spark.sluice.aggregate.partial.hash): a partial aggregation Spark
plans as a sort and a sort aggregation (here for max of a struct, as Nexmark q7 takes the highest
bid) runs as an object-hash aggregation, without the sort.

The scenarios, input and model are window slicing's (support/slicing.py: one JSON file per
micro-batch, final results against a model of windows and the watermark) on tumbling windows; the
query (support/partial_hash.py) takes the largest value through max(struct(v, ts)), whose buffer
Spark's hash aggregation cannot hold.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from support.partial_hash import KEY, aggregates, map_side, rows
from support.session import session_conf
from support.slicing import BATCHES, SIZE, T0, SwitchedRun, final, json_lines, model, switched

# dev/test: run on every supported Spark minor
pytestmark = pytest.mark.every_minor


@pytest.mark.parametrize("store,mode", [("hdfs", "append"), ("rocksdb", "final"), ("in_memory_window", "final")],
                         indirect=["store"])
def test_partial_hash_restarted_on_and_off_gives_the_final_results(
        spark: SparkSession, tmp_path: Path, store: str, mode: str) -> None:
    """On for three batches, off after a restart, on again after another; each restart replays the
    batch the stop left uncommitted under the other setting, and the replay emits what it emitted."""
    window = F.window("ts", f"{SIZE} seconds")
    if mode == "append":
        run = SwitchedRun(spark, tmp_path, lambda df: rows(aggregates(df, window)), "append", KEY)
    else:
        run = SwitchedRun(spark, tmp_path, lambda df: rows(final(aggregates(df, window))), "update", KEY)
    plans = switched(run, map_side)
    assert plans == ["hash", "sort", "hash"], plans
    expected = model(SIZE, SIZE)
    assert len(expected) >= 8
    assert run.emitted() == expected
    assert len(run.replayed) == 2 and {b: run.first[b] for b in run.replayed} == run.replayed


def test_batch_query_by_hash_gives_the_rows_of_the_sorted_plan(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "events.json"
    path.write_text(json_lines([e for b in BATCHES for e in b]))
    events = spark.read.schema("ts timestamp, user string, v long").json(str(path))
    results, plans = {}, {}
    for on in (False, True):
        with session_conf(spark, {KEY: str(on).lower()}):
            df = (events.groupBy(F.window("ts", f"{SIZE} seconds"), "user")
                  .agg(F.count("*").alias("n"), F.max(F.struct("v", "ts")).alias("m"), F.min(F.struct("ts", "v")).alias("l"))
                  .select((F.col("window.start").cast("long") - int(T0.timestamp())).alias("s"), "user", "n",
                          "m.v", "l.v"))
            results[on] = sorted(tuple(r) for r in df.collect())
            plan = df._jdf.queryExecution().executedPlan().toString()
            plans[on] = map_side(plan.split("== Final Plan ==")[-1].split("== Initial Plan ==")[0])
    assert plans == {False: "sort", True: "hash"}, plans
    assert len(results[True]) >= 8 and results[True] == results[False]
