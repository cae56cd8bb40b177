"""The golden checkpoints: one small checkpoint per file format sluice writes, made by
tests/golden/generate.py with the sluice of its time and restarted by tests/state/test_golden.py with the
current one. Each scenario says how its checkpoint is written (settings per run, input per batch),
how it restarts, and what it must then emit, computed here in Python from the input alone."""
from __future__ import annotations

import json
import random
import shutil
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import sluice
from sluice import BufferConfig, Suppressed, _handles, suppress
from sluice._conf import contract, spec
from support.session import session_conf

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
KEY = contract()["provider_class_key"]
PREFIX = spec()["prefix"]
INTERVAL_KEY = PREFIX + "commit.interval.ms"
T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
# Past every golden event plus the watermark delay: a row at this time closes every golden window.
FAR = 3 * 3600

Rows = list[dict[str, Any]]


def configured(**options: Any) -> dict[str, str]:
    """The session settings sluice.configure sets for `options`, with the keys any scenario sets back
    at their defaults (so one scenario's settings never leak into the next)."""
    settings = _handles.builder_options(sluice.configure(SparkSession.builder, **options))
    chosen = {k: str(v) for k, v in settings.items() if k == KEY or k.startswith(PREFIX)}
    defaults = {PREFIX + "statestore.cache.delegate": "rocksdb", INTERVAL_KEY: "0",
                KEY: "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
                PREFIX + "suppress.fused": "true", "spark.sql.shuffle.partitions": "2"}
    return {**defaults, **chosen}


def stamp(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def seconds(ts: str) -> float:
    return (datetime.fromisoformat(ts.replace("Z", "+00:00")) - T0).total_seconds()


def golden_input(seed: int = 7) -> list[Rows]:
    """Three batches of events over the first minute, keys repeating, so windows span batches."""
    rnd = random.Random(seed)
    return [[{"ts": stamp(b * 15 + rnd.randrange(30)), "k": f"k{rnd.randrange(4)}"} for _ in range(12)]
            for b in range(3)]


# --- what the queries compute, in Python ---------------------------------------------------------

def window_counts(batches: list[Rows]) -> dict[tuple[float, str], int]:
    """The count per 10-second window (its start, seconds after T0) and key."""
    counts: Counter = Counter()
    for rows in batches:
        for r in rows:
            s = seconds(r["ts"])
            counts[(s - s % 10, r["k"])] += 1
    return dict(counts)


GAP = 5.0


def session_counts(batches: list[Rows]) -> dict[tuple[str, float, float], int]:
    """The count per session window (key, start, end; seconds after T0) with a 5-second gap: an
    event starts a new session when it is more than the gap after the session's last event."""
    by_key: dict[str, list[float]] = {}
    for rows in batches:
        for r in rows:
            by_key.setdefault(r["k"], []).append(seconds(r["ts"]))
    out: dict[tuple[str, float, float], int] = {}
    for k, times in by_key.items():
        times.sort()
        start, last, n = times[0], times[0], 0
        for t in times:
            if t > last + GAP:  # Spark merges a session with one starting right at its end
                out[(k, start, last + GAP)] = n
                start, n = t, 0
            last, n = t, n + 1
        out[(k, start, last + GAP)] = n
    return out


# --- the scenarios -------------------------------------------------------------------------------

@dataclass
class Scenario:
    """One golden checkpoint. `runs`: per query run, its settings and the batches it is fed (the
    checkpoint ends with what the last run holds). `restart`: the settings of the restart on the
    current sluice. `query`: windowed counts, or session counts; `final` puts suppress
    until_window_closes above them (`spill`: a one-record buffer spilling to disk)."""
    name: str
    files: str  # what the checkpoint holds that the scenario exists for (a glob under the checkpoint)
    formats: list[str]  # the kinds of sluice.state.FileFormats the checkpoint holds
    runs: list[tuple[dict[str, str], list[Rows]]]
    restart: dict[str, str]
    sessions: bool = False
    final: str | None = None  # None, "spill" or "fused"
    notes: list[str] = field(default_factory=list)

    def input(self) -> list[Rows]:
        return [b for _, batches in self.runs for b in batches]

    def more(self) -> list[Rows]:
        """The restart's input: an event at each golden window's or session's first event (so that
        every key the checkpoint holds is updated again and emitted), new keys, and for final
        results an event far ahead, which closes every earlier window."""
        seen: dict[Any, str] = {}
        for rows in self.input():
            for r in sorted(rows, key=lambda r: r["ts"]):
                s = seconds(r["ts"])
                k = (r["k"], s - s % 10) if not self.sessions else (r["k"], self.session_of(r))
                seen.setdefault(k, r["ts"])
        again = [{"ts": ts, "k": k[0]} for k, ts in sorted(seen.items())]
        fresh = [{"ts": stamp(200 + i), "k": f"n{i % 2}"} for i in range(4)]
        batches = [again, fresh]
        if self.final:
            batches.append([{"ts": stamp(FAR), "k": "far"}])
        return batches

    def session_of(self, row: dict[str, Any]) -> float:
        s = seconds(row["ts"])
        return next(st for (k, st, end) in session_counts(self.input()) if k == row["k"] and st <= s < end)

    def expected(self) -> dict[Any, int]:
        """What the restarted query's output must hold at the end: every window's (or session's)
        count over all input, golden and new; for final results only the windows the far event
        closed, each emitted once."""
        every = self.input() + self.more()
        if self.sessions:
            return session_counts(every)
        counts = window_counts(every)
        if self.final:
            return {w: n for w, n in counts.items() if w[0] < FAR - 3600}
        return counts

    def query(self, events: DataFrame) -> DataFrame:
        events = events.withWatermark("ts", "1 hour")
        if self.sessions:
            return events.groupBy(F.session_window("ts", f"{int(GAP)} seconds"), "k").count()
        counts = events.groupBy(F.window("ts", "10 seconds"), "k").count()
        if self.final == "spill":
            spill = BufferConfig.max_records(1).spill_to_disk_when_full()
            return suppress(counts, Suppressed.until_window_closes(spill))
        if self.final == "fused":
            return suppress(counts, Suppressed.until_window_closes(BufferConfig.unbounded()))
        return counts


def _count_runs(options: dict[str, Any], interval: str) -> list[tuple[dict[str, str], list[Rows]]]:
    return [(configured(**options, commit_interval_ms=interval), golden_input())]


def _write_behind_runs(options: dict[str, Any]) -> list[tuple[dict[str, str], list[Rows]]]:
    """A first batch the delegate commits (its own files), then batches written behind it."""
    return [(configured(**options), golden_input()[:1]),
            (configured(**options, commit_interval_ms="1h"), golden_input()[1:])]


WB, DELEGATE, SIDECAR = "write-behind log", "record cache delegate marker", "operator settings file"
WB_HDFS = {"state_store_cache": True, "statestore_cache_delegate": "hdfs"}
WB_ROCKSDB = {"state_store_cache": True, "statestore_cache_delegate": "rocksdb"}

SCENARIOS: list[Scenario] = [
    # write-behind: the delegate commits the first batch, then once an hour, so the rows of the
    # later batches are in the write-behind log at the end; the restart at interval 0 commits them
    Scenario("record-cache-hdfs-write-behind", "state/0/*/_sluice_writebehind/*.wb", [WB, DELEGATE],
             _write_behind_runs(WB_HDFS), configured(**WB_HDFS)),
    Scenario("record-cache-rocksdb-write-behind", "state/0/*/_sluice_writebehind/*.wb", [WB, DELEGATE],
             _write_behind_runs(WB_ROCKSDB), configured(**WB_ROCKSDB)),
    Scenario("window-store", "state/0/*/*.wdelta", ["window store file"],
             _count_runs({"state_store": "in_memory_window"}, "0"), configured(state_store="in_memory_window")),
    # the emission cache joins a checkpoint that ran a batch without it (its first-version file),
    # then holds the next batches' results (interval 1h); the restart at interval 0 forwards them
    Scenario("emission-cache", "state/*/_sluice_emit_cache_first_version",
             ["emission cache first version", "emission cache state row layout", SIDECAR],
             [(configured(state_store="hdfs"), golden_input()[:1]),
              (configured(state_store="hdfs", commit_interval_ms="1h"), golden_input()[1:])],
             configured(state_store="hdfs")),
    Scenario("suppress-spill", "state/*/_sluice_operator.json", ["suppress state row layout", SIDECAR],
             [(configured(state_store="hdfs"), golden_input())], configured(state_store="hdfs"), final="spill"),
    Scenario("fused-final", "state/0/_sluice_fused_final", ["fused final results marker"],
             [(configured(state_store="hdfs"), golden_input())], configured(state_store="hdfs"), final="fused"),
    Scenario("session-update", "state/*/_sluice_session_plan", ["session plan record"],
             [(configured(state_store="hdfs"), golden_input())], configured(state_store="hdfs"), sessions=True),
]
BY_NAME = {s.name: s for s in SCENARIOS}


class Query:
    """A scenario's query on one checkpoint, fed one file per micro-batch from its own folder; the
    rows it emitted, keyed as the scenario's model keys them."""

    def __init__(self, spark: SparkSession, scenario: Scenario, ckpt: Path, src: Path) -> None:
        self.spark, self.scenario, self.ckpt, self.src = spark, scenario, ckpt, src
        src.mkdir(parents=True, exist_ok=True)
        self.files = len(list(src.glob("part-*.json")))
        self.rows: list[tuple[Any, int | None]] = []

    def start(self, settings: dict[str, str]) -> Any:
        def collect(batch: DataFrame, _: int) -> None:
            if self.scenario.sessions:
                w = F.col("session_window")
                cols = ["k", w.start.cast("long") - int(T0.timestamp()), w.end.cast("long") - int(T0.timestamp()),
                        "count"]
                self.rows.extend(((r[0], float(r[1]), float(r[2])), r[3]) for r in batch.select(*cols).collect())
            else:
                start = F.col("window.start").cast("long") - int(T0.timestamp())
                self.rows.extend(((float(r[0]), r[1]), r[2]) for r in batch.select(start, "k", "count").collect())

        events = (self.spark.readStream.schema("ts TIMESTAMP, k STRING").option("maxFilesPerTrigger", 1)
                  .json(str(self.src)))
        with session_conf(self.spark, settings):
            return (self.scenario.query(events).writeStream.outputMode("update").foreachBatch(collect)
                    .option("checkpointLocation", str(self.ckpt)).start())

    def write(self, rows: Rows) -> None:
        tmp = self.src / f".part-{self.files:05d}.json"  # the file source skips hidden files
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.rename(self.src / f"part-{self.files:05d}.json")
        self.files += 1

    def run(self, settings: dict[str, str], batches: list[Rows]) -> None:
        """Starts on the checkpoint, processes each of `batches` as a micro-batch, and stops."""
        q = self.start(settings)
        try:
            q.processAllAvailable()
            for rows in batches:
                self.write(rows)
                q.processAllAvailable()
        finally:
            q.stop()

    def table(self) -> dict[Any, int]:
        """Update mode: a key's last row is its value; a session's row without a count retracts it."""
        out: dict[Any, int] = {}
        for key, n in self.rows:
            if n is None:
                out.pop(key, None)
            else:
                out[key] = n
        return out


# The sets of golden checkpoints, each named by the formats it holds: "0.1.0", the files as sluice
# 0.1.0 wrote them (no version in them: format 1 each, the window store's 2); "format-1", the same
# formats with their versions written; "format-2", the scenarios whose files format 2 changed (the
# checksums of the write-behind log and of the small marker files). A later set holds only the
# scenarios a format change touched.
SETS = ["0.1.0", "format-1", "format-2"]

# (set, scenario name) of every golden checkpoint there is.
PAIRS = [(g, s.name) for g in SETS for s in SCENARIOS if (GOLDEN / g / s.name).is_dir()]


def latest_set(name: str) -> str:
    """The newest set holding scenario `name`."""
    return [g for g, n in PAIRS if n == name][-1]


def copy_checkpoint(set_name: str, name: str, to: Path) -> Path:
    shutil.copytree(GOLDEN / set_name / name / "checkpoint", to)
    return to

