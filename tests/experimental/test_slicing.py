"""Window slicing (spark.sluice.window.slicing): a sliding-window aggregation's map side aggregates
each slice of event time once per key, then forms the windows from the slices.

Each scenario feeds one JSON file per micro-batch (maxFilesPerTrigger=1) and records each batch's
rows by batch id. Expected results come from a small model of sliding windows and the watermark
written here; the plan's map side (below the aggregation's exchange) shows whether it was sliced.
"""
from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sluice._conf import state_store_providers
from support.session import session_conf
from support.slicing import (
    BATCHES,
    DELAY,
    SIZE,
    SLICED,
    SLICING_KEY,
    SLIDE,
    T0,
    UNSLICED,
    Run,
    aggregates,
    fed_sliced,
    final,
    json_lines,
    map_side,
    model,
    switched,
    ts,
    windows_of,
)

# dev/test: run on every supported Spark minor
pytestmark = pytest.mark.every_minor


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
    from support.children import kill_after_batches
    from support.inputs import write_hourly_files
    from support.sinks import drain_to_files
    from support.suppress_kill_child import file_sink, final_results

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
