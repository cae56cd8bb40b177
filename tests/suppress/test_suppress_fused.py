"""Fused final results: an unbounded suppress(until_window_closes) directly on a windowed aggregation
runs as that aggregation with Spark's append-mode state save (no suppress buffer), in update mode.

Each scenario feeds the same input to the fused plan, the unfused plan (spark.sluice.suppress.fused
=false) and Spark's own append mode, one JSON file per micro-batch (maxFilesPerTrigger=1), waiting
for each file to be processed; the sink records each batch's rows by batch id. Expected final
results come from a small model of windows and the watermark written here.
"""
from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sluice import BufferConfig, Suppressed, suppress
from support.inputs import write_hourly_files
from support.session import session_conf

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
FUSED_KEY = "spark.sluice.suppress.fused"
PROVIDERS = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "in_memory_window": "sluice.windowstore.InMemoryWindowStoreProvider",
}
DELAY = 10  # watermark delay, seconds
SIZE = 60   # window size, seconds

# Events (seconds after T0, user) per micro-batch: out of order within and across batches, late
# events for windows already closed, and a restart after the fourth batch.
BATCHES = [
    [(5, "a"), (50, "b"), (20, "a")],
    [(65, "a"), (30, "b"), (75, "c")],            # watermark 40 -> 65: [0, 60) closes after this batch
    [(10, "a"), (61, "b"), (125, "a"), (90, "c")],  # (10, a): late, its window is closed
    [(100, "b"), (119, "a"), (185, "b")],         # [60, 120) closes
    [(121, "c"), (55, "a"), (170, "a"), (240, "c")],  # (55, a) late; [120, 180) closes
    [(230, "a"), (199, "b"), (175, "b")],         # (175, b) late for [120, 180)
    [(400, "z")],                                  # closes everything before 390
]
RESTART_AFTER = 4


def ts(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S")


def windows_of(t: int, slide: Optional[int]) -> list[int]:
    """Starts of the windows (size SIZE, sliding by `slide`, tumbling if None) holding time t."""
    step = slide or SIZE
    first = (t // step) * step
    return [s for s in range(first - SIZE + step, first + 1, step) if s <= t < s + SIZE]


def model(slide: Optional[int]) -> dict[tuple[int, str], int]:
    """Final results: per window and user, the events that were not late when they arrived.

    Every data batch is followed by the no-data batch its watermark advance triggers, so an event
    is late when its window ended at or before the largest event time of earlier batches minus
    the delay; a window is emitted once that watermark reaches its end."""
    wm = 0
    counts: Counter = Counter()
    for batch in BATCHES:
        for t, user in batch:
            for s in windows_of(t, slide):
                if s + SIZE > wm:
                    counts[(s, user)] += 1
        wm = max(wm, max(t for t, _ in batch) - DELAY)
    return {k: n for k, n in counts.items() if k[0] + SIZE <= wm}


class Run:
    """One query over its own input folder and checkpoint, fed one file per micro-batch."""

    def __init__(self, spark: SparkSession, root: Path) -> None:
        self.spark = spark
        self.src = root / "in"
        self.ckpt = root / "ckpt"
        self.src.mkdir(parents=True)
        self.files = 0
        self.batches: dict[int, list[tuple]] = {}
        self.query: Any = None

    def counts(self, slide: Optional[int]) -> DataFrame:
        events = (self.spark.readStream.schema("ts timestamp, user string")
                  .option("maxFilesPerTrigger", 1).json(str(self.src)))
        window = F.window("ts", f"{SIZE} seconds", f"{slide} seconds" if slide else None)
        return events.withWatermark("ts", f"{DELAY} seconds").groupBy(window, "user").count()

    def start(self, df: DataFrame, mode: str = "update") -> None:
        def sink(batch: DataFrame, batch_id: int) -> None:
            start = F.col("window.start").cast("long") - int(T0.timestamp())  # seconds after T0, any time zone
            values = [c for c in batch.columns if c not in ("window", "user")]  # count, or the aggregates
            self.batches[batch_id] = sorted(tuple(r) for r in batch.select(start, "user", *values).collect())

        self.query = (df.writeStream.outputMode(mode).foreachBatch(sink)
                      .option("checkpointLocation", str(self.ckpt)).start())

    def feed(self, events: list[tuple]) -> None:
        """Events (seconds after T0, user[, v])."""
        path = self.src / f"{self.files:05d}.json"
        tmp = self.src / f".{self.files:05d}.tmp"
        tmp.write_text("".join(json.dumps({"ts": ts(e[0]), "user": e[1], **({"v": e[2]} if len(e) > 2 else {})}) + "\n"
                               for e in events))
        tmp.rename(path)
        self.files += 1
        self.query.processAllAvailable()

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()
            self.query = None

    def emitted(self) -> Counter:
        return Counter((s, u, n) for rows in self.batches.values() for s, u, n in rows)

    def nonempty(self) -> dict[int, list[tuple]]:
        return {b: rows for b, rows in self.batches.items() if rows}

    def operators(self) -> list[str]:
        return [op["operatorName"] for op in self.query.lastProgress["stateOperators"]]


def final(df: DataFrame) -> DataFrame:
    return suppress(df, Suppressed.until_window_closes(BufferConfig.unbounded()))


def drive(spark: SparkSession, root: Path, build: Callable[[Run], DataFrame], mode: str = "update",
          conf: Optional[dict[str, str]] = None, batches: list[list[tuple]] = BATCHES,
          restart_after: int = RESTART_AFTER) -> tuple[Run, list[str], str]:
    """Runs `build`'s query over `batches` with a restart after `restart_after` of them; returns
    the run, the state operators of its last progress and its physical plan."""
    run = Run(spark, root)
    with session_conf(spark, conf or {}):
        try:
            run.start(build(run), mode)
            for i, events in enumerate(batches):
                if i == restart_after:
                    run.stop()
                    run.start(build(run), mode)
                run.feed(events)
            ops, plan = run.operators(), run.query._jsq.explainInternal(False)
        finally:
            run.stop()
    return run, ops, plan


def state_dirs(run: Run) -> set[str]:
    return {d.name for d in (run.ckpt / "state").iterdir() if d.name.isdigit()}


@pytest.fixture
def store(request: pytest.FixtureRequest, spark: SparkSession) -> Any:
    with session_conf(spark, {"spark.sql.streaming.stateStore.providerClass": PROVIDERS[request.param]}):
        yield request.param


@pytest.mark.parametrize("store,slide", [("hdfs", None), ("rocksdb", 20), ("in_memory_window", 30)],
                         indirect=["store"])
def test_fused_output_equals_unfused_and_append_mode(spark: SparkSession, tmp_path: Path, store: str,
                                                     slide: Optional[int]) -> None:
    fused, fused_ops, fused_plan = drive(spark, tmp_path / "fused", lambda r: final(r.counts(slide)))
    unfused, unfused_ops, _ = drive(spark, tmp_path / "unfused", lambda r: final(r.counts(slide)),
                                    conf={FUSED_KEY: "false"})
    append, _, _ = drive(spark, tmp_path / "append", lambda r: r.counts(slide), mode="append")

    expected = model(slide)
    assert len(expected) >= 10 and len(set(s for s, _ in expected)) >= 4
    assert fused.emitted() == Counter((s, u, n) for (s, u), n in expected.items())
    # The same rows in the same micro-batches as the suppress operator and as append mode.
    assert fused.nonempty() == unfused.nonempty() == append.nonempty()

    # Fused: the aggregation is the only stateful operator, saving in append mode.
    assert fused_ops == ["stateStoreSave"], fused_ops
    assert "Suppress" not in fused_plan and "StateStoreSave" in fused_plan and "Append" in fused_plan, fused_plan
    assert state_dirs(fused) == {"0"} and (fused.ckpt / "state" / "0" / "_sluice_fused_final").exists()
    assert sorted(unfused_ops) == ["stateStoreSave", "suppress"]
    assert state_dirs(unfused) == {"0", "1000"}


def test_fused_with_a_column_keeping_projection_and_bounded_config_kept_unfused(
        spark: SparkSession, tmp_path: Path) -> None:
    """A projection that keeps the aggregation's columns is looked through; a bounded buffer keeps
    the suppress operator (its bound applies to its buffer) and gives the same final results."""
    def projected(r: Run) -> DataFrame:
        return final(r.counts(None).select("user", "count", "window"))

    def bounded(r: Run) -> DataFrame:
        cfg = BufferConfig.max_records(100).shut_down_when_full()
        return suppress(r.counts(None), Suppressed.until_window_closes(cfg))

    proj, proj_ops, _ = drive(spark, tmp_path / "proj", projected)
    bound, bound_ops, _ = drive(spark, tmp_path / "bounded", bounded)
    expected = Counter((s, u, n) for (s, u), n in model(None).items())
    assert proj_ops == ["stateStoreSave"]
    assert sorted(bound_ops) == ["stateStoreSave", "suppress"]
    assert proj.emitted() == bound.emitted() == expected


def test_unfused_checkpoint_keeps_running_unfused_after_upgrade(spark: SparkSession, tmp_path: Path) -> None:
    """A checkpoint written by the suppress operator (before fusion existed, or with it disabled)
    keeps that operator when restarted with fusion on: its buffer holds the open windows."""
    run = Run(spark, tmp_path)
    with session_conf(spark, {FUSED_KEY: "false"}):
        run.start(final(run.counts(None)))
        for events in BATCHES[:RESTART_AFTER]:
            run.feed(events)
        run.stop()
    run.start(final(run.counts(None)))  # fusion on (the default)
    for events in BATCHES[RESTART_AFTER:]:
        run.feed(events)
    ops = run.operators()
    run.stop()
    assert sorted(ops) == ["stateStoreSave", "suppress"]
    assert run.emitted() == Counter((s, u, n) for (s, u), n in model(None).items())
    assert not (run.ckpt / "state" / "0" / "_sluice_fused_final").exists()


def test_fused_checkpoint_restarted_unfused_fails_with_a_clear_message(spark: SparkSession, tmp_path: Path) -> None:
    run = Run(spark, tmp_path)
    run.start(final(run.counts(None)))
    for events in BATCHES[:RESTART_AFTER]:
        run.feed(events)
    run.stop()

    with session_conf(spark, {FUSED_KEY: "false"}):
        run.start(final(run.counts(None)))
        with pytest.raises(StreamingQueryException) as e:
            run.feed(BATCHES[RESTART_AFTER])
        run.query = None
    msg = str(e.value)
    assert "written with suppress(until_window_closes) fused" in msg and f"Set {FUSED_KEY}=true" in msg, msg

    # Nothing was lost: with fusion back on, the query resumes and emits every final result.
    run.start(final(run.counts(None)))
    run.query.processAllAvailable()  # the file written by the failed attempt
    for events in BATCHES[RESTART_AFTER + 1:]:
        run.feed(events)
    run.stop()
    assert run.emitted() == Counter((s, u, n) for (s, u), n in model(None).items())


def test_kill_and_restart_fused_emits_each_final_result_exactly_once(spark: SparkSession, tmp_path: Path) -> None:
    """SIGKILL the whole process (driver JVM included) of a fused query mid-stream, restart it here
    on the same checkpoint: with a sink idempotent per batch id, every final result arrives once."""
    from support.children import kill_after_batches
    from support.inputs import hourly_finals
    from support.sinks import drain_to_files, emitted_finals
    from support.suppress_kill_child import file_sink, final_results

    provider = PROVIDERS["in_memory_window"]
    src, ckpt, out = tmp_path / "in", tmp_path / "ckpt", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    hours = 8
    t0 = T0.replace(tzinfo=None)
    write_hourly_files(src, hours, ts)

    kill_after_batches("suppress_kill_child.py", [str(src), str(ckpt), str(out), provider], out, batches=4)
    assert len(list(out.glob("*.json"))) < 2 * hours  # killed mid-stream, not after the end
    # The child ran fused: one stateful operator, marked in its state directory.
    assert {d.name for d in (ckpt / "state").iterdir() if d.name.isdigit()} == {"0"}
    assert (ckpt / "state" / "0" / "_sluice_fused_final").exists()

    drain_to_files(spark, final_results(spark, str(src)), file_sink(str(out)), ckpt,
                   {"spark.sql.streaming.stateStore.providerClass": provider})

    assert emitted_finals(out) == hourly_finals(hours, lambda h: (t0 + timedelta(hours=h)).isoformat())


def above_the_save(plan: str) -> list[str]:
    """The physical plan's operators above its state save (explain() prints a node's children below it)."""
    lines = plan.split("== Physical Plan ==")[-1].splitlines()
    return lines[:next(i for i, line in enumerate(lines) if "StateStoreSave" in line)]


# Values per micro-batch: (seconds after T0, user, v); windows of every batch but the last close.
VALUED = [
    [(5, "a", 1.5), (50, "b", -0.0), (20, "a", 2.25), (21, "b", -0.0)],
    [(65, "a", 7.0), (30, "b", -3.5), (75, "c", None)],
    [(10, "a", 9.0), (125, "a", 0.5), (90, "c", 4.0), (61, "b", 2.0)],
    [(400, "z", 1.0)],
]


@pytest.mark.parametrize("store", sorted(PROVIDERS), indirect=True)
@pytest.mark.parametrize("functions", ["declarative", "with_collect_list"])
def test_fused_final_results_are_computed_per_row_without_a_final_aggregation(
        spark: SparkSession, tmp_path: Path, store: str, functions: str) -> None:
    """Fused, the final aggregation above the append-mode save (one row per key there) is a per-row
    projection when every function is declarative; the results equal Spark's own append mode."""
    def aggregated(r: Run) -> DataFrame:
        events = (spark.readStream.schema("ts timestamp, user string, v double")
                  .option("maxFilesPerTrigger", 1).json(str(r.src)))
        aggs = [F.count("*").alias("n"), F.sum("v").alias("total"), F.avg("v").alias("mean"),
                F.min("user").alias("first_user"), F.max_by("user", "v").alias("top"), F.max("v").alias("high")]
        if functions == "with_collect_list":
            aggs.append(F.array_sort(F.collect_list("v")).alias("vs"))
        return (events.withWatermark("ts", f"{DELAY} seconds")
                .groupBy(F.window("ts", f"{SIZE} seconds"), "user").agg(*aggs))

    # stopped after the second batch and restarted on its checkpoint
    fused, _, plan = drive(spark, tmp_path / "fused", lambda r: final(aggregated(r)), batches=VALUED, restart_after=2)
    append, _, _ = drive(spark, tmp_path / "append", aggregated, mode="append", batches=VALUED, restart_after=2)
    emitted = [row for rows in fused.nonempty().values() for row in rows]
    assert len(emitted) == 6  # [0, 60): a, b; [60, 120): a, b, c; [120, 180): a
    assert fused.nonempty() == append.nonempty()  # the same rows in the same micro-batches
    aggregates = [line for line in above_the_save(plan) if "Aggregate" in line]
    assert len(aggregates) == (0 if functions == "declarative" else 1), plan
