"""The composition matrix (test_composition.py, also run on several executors by test_multi_executor.py):
its input and expectations, the queries, a combination's run and what every combination must emit."""
from __future__ import annotations

import json
import os
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sluice import BufferConfig, Suppressed, suppress
from support.crash_soak import sessions_of

PROVIDERS = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "in_memory_window": "sluice.windowstore.InMemoryWindowStoreProvider",
}
CACHING = "sluice.cache.CachingStateStoreProvider"
PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"
DELEGATE_KEY = "spark.sluice.statestore.cache.delegate"
INTERVAL_KEY = "spark.sluice.commit.interval.ms"
# Small enough that the record cache evicts (writing to its delegate mid-batch) on this input.
CACHE_BYTES = 4096

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
WINDOW_S = 10
DELAY_S = 5
TIME_LIMIT_S = 15
USERS = ["u0", "u1", "u2", "u3"]
CLOSING_USERS = USERS + ["z0", "z1", "z2", "z3"]  # the last step's keys: enough to reach both partitions


# ---------------------------------------------------------------------------------------------
# input and expectations (all in seconds after T0)

def iso(t: int) -> str:
    return (T0 + timedelta(seconds=t)).strftime("%Y-%m-%dT%H:%M:%SZ")


def start_string(t: int) -> str:
    return (T0 + timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S")


def window_of(t: int) -> int:
    return t - t % WINDOW_S


def make_steps(seed: int = 11, steps: int = 3) -> list[list[list[tuple[int, str]]]]:
    """Data steps, each two files of (ts, user) events: time moves ~8 s a step, events arrive up to
    12 s out of order, and some are clearly late."""
    rnd = random.Random(seed)
    out: list[list[list[tuple[int, str]]]] = []
    max_ts: int | None = None
    for s in range(steps):
        base = 5 + 8 * s
        files = [[(max(0, base + rnd.randint(-12, 6)), rnd.choice(USERS)) for _ in range(rnd.randint(4, 6))]
                 for _ in range(2)]
        if max_ts is not None:  # a late event for an already closed window
            files[0].append((max_ts - DELAY_S - WINDOW_S - rnd.randint(0, 5), rnd.choice(USERS)))
        wm_start = max_ts - DELAY_S if max_ts is not None else None
        step_max = max([t for f in files for t, _ in f] + ([max_ts] if max_ts is not None else []))
        wm_any_split = step_max - DELAY_S  # the highest watermark any batch of this step can see

        def unambiguous(t: int) -> bool:
            end = window_of(t) + WINDOW_S
            late_at_start = wm_start is not None and end <= wm_start
            return late_at_start or end > wm_any_split
        files = [[e for e in f if unambiguous(e[0])] for f in files]
        assert all(files), "a file lost all its events; pick another seed"
        out.append(files)
        max_ts = max([t for f in files for t, _ in f] + ([max_ts] if max_ts is not None else []))
    return out


def closing_step(steps: list[list[list[tuple[int, str]]]]) -> list[list[tuple[int, str]]]:
    last = max(t for step in steps for f in step for t, _ in f)
    far = window_of(last) + 10 * WINDOW_S
    return [[(far + i % 3, u) for i, u in enumerate(CLOSING_USERS)]]


def expected(steps: list[list[list[tuple[int, str]]]]) -> tuple[dict[tuple[int, str], int], int, int]:
    """(count per (window start, user) of the events that are not late, late events, final watermark)."""
    counts: dict[tuple[int, str], int] = {}
    late = 0
    max_ts: int | None = None
    for step in steps:
        wm = max_ts - DELAY_S if max_ts is not None else None
        for f in step:
            for t, u in f:
                if wm is not None and window_of(t) + WINDOW_S <= wm:
                    late += 1
                else:
                    counts[(window_of(t), u)] = counts.get((window_of(t), u), 0) + 1
        max_ts = max([t for f in step for t, _ in f] + ([max_ts] if max_ts is not None else []))
    assert max_ts is not None
    return counts, late, max_ts - DELAY_S


def late_events(steps: list[list[list[tuple[int, str]]]]) -> list[tuple[int, str]]:
    """The (ts, user) events expected() counts as late, sorted."""
    late: list[tuple[int, str]] = []
    max_ts: int | None = None
    for step in steps:
        wm = max_ts - DELAY_S if max_ts is not None else None
        late += [(t, u) for f in step for t, u in f if wm is not None and window_of(t) + WINDOW_S <= wm]
        max_ts = max([t for f in step for t, _ in f] + ([max_ts] if max_ts is not None else []))
    return sorted(late)


STEPS = make_steps()
ALL_STEPS = STEPS + [closing_step(STEPS)]
COUNTS, LATE, FINAL_WM = expected(ALL_STEPS)
LATE_EVENTS = late_events(ALL_STEPS)
DATA_KEYS = set(expected(STEPS)[0])


def make_session_steps(seed: int = 1, steps: int = 3) -> list[list[list[tuple[int, str]]]]:
    """Data steps for the session queries, two files each: out of order by less than the watermark
    delay, so no event is ever late, whichever batch it lands in."""
    rnd = random.Random(seed)
    newest = 0
    out = []
    for s in range(steps):
        files = []
        for _ in range(2):
            f = []
            for _ in range(rnd.randint(3, 5)):
                t = max(0, newest - (DELAY_S - 1), 2 + 5 * s + rnd.randint(-DELAY_S, 3))
                newest = max(newest, t)
                f.append((t, rnd.choice(USERS)))
            files.append(f)
        out.append(files)
    return out


SESSION_GAP_S = 3
SESSION_STEPS = make_session_steps()
SESSION_ALL_STEPS = SESSION_STEPS + [closing_step(SESSION_STEPS)]
SESSIONS = {(start_string(a), start_string(b), u): n for (u, a, b), n in
            sessions_of([e for step in SESSION_STEPS for f in step for e in f], SESSION_GAP_S).items()}


# ---------------------------------------------------------------------------------------------
# the queries

def windowed_counts(events: DataFrame) -> DataFrame:
    return events.groupBy(F.window("ts", f"{WINDOW_S} seconds"), "user").count()


def session_counts(events: DataFrame) -> DataFrame:
    return events.groupBy(F.session_window("ts", f"{SESSION_GAP_S} seconds"), "user").count()


QUERIES = {
    "update": windowed_counts,
    "session_updates": session_counts,
    "session_finals": lambda e: suppress(session_counts(e), Suppressed.until_window_closes(BufferConfig.unbounded())),
    "window_closes": lambda e: suppress(windowed_counts(e), Suppressed.until_window_closes(BufferConfig.unbounded())),
    "time_limit": lambda e: suppress(
        e.groupBy(F.window("ts", f"{WINDOW_S} seconds"), "user").agg(F.count("*").alias("count"),
                                                                        F.max("ts").alias("ts")),
        Suppressed.until_time_limit(timedelta(seconds=TIME_LIMIT_S), BufferConfig.unbounded()), time_col="ts"),
}


class Run:
    """One combination: its own SparkSession (shared SparkContext, own SQL conf, so runs can start
    concurrently), input folder, checkpoint and emitted rows."""

    def __init__(self, spark: SparkSession, root: Path, combo: "Combo"):
        self.spark, self.root, self.combo = spark.newSession(), root, combo
        if combo.record_cache:
            self.spark.conf.set(PROVIDER_KEY, CACHING)
            self.spark.conf.set(DELEGATE_KEY, combo.provider)
        else:
            self.spark.conf.set(PROVIDER_KEY, PROVIDERS[combo.provider])
        self.src = root / "in"
        self.src.mkdir(parents=True)
        self.steps = 0
        self.files = 0
        self.emitted: list[tuple[str, str, int]] = []
        self.progress: list[dict] = []

    def start(self, interval: str) -> None:
        self.spark.conf.set(INTERVAL_KEY, interval)
        reader = self.spark.readStream.schema("ts timestamp, user string")
        if self.combo.bound:
            reader = reader.option("sluice.maxBytesPerTrigger", str(smallest_file_bytes(self.combo.steps) - 1))
        events = reader.json(str(self.src / "*")).withWatermark("ts", f"{DELAY_S} seconds")

        def sink(batch: DataFrame, _: int) -> None:
            cols = (["CAST(session_window.start AS STRING)", "CAST(session_window.end AS STRING)"]
                    if self.combo.sessions else ["CAST(window.start AS STRING)"])
            self.emitted.extend(tuple(r) for r in batch.selectExpr(*cols, "user", "count").collect())

        if self.combo.keeps_late:
            query = suppress(windowed_counts(events), Suppressed.until_window_closes(BufferConfig.unbounded())
                             .with_late_records(str(self.root / "late"), "json"))
        else:
            query = QUERIES[self.combo.query](events)
        self.q = (query.writeStream.outputMode("update").foreachBatch(sink)
                  .option("checkpointLocation", str(self.root / "ckpt")).start())

    def feed(self, step: list[list[tuple[int, str]]]) -> None:
        staging = self.root / f"staging-{self.steps}"
        staging.mkdir()
        now = time.time()
        for f in step:
            path = staging / f"{self.files:04d}.json"
            path.write_text("".join(json.dumps({"ts": iso(t), "user": u}) + "\n" for t, u in f))
            os.utime(path, (now + self.files, now + self.files))  # the source takes files in this order
            self.files += 1
        staging.rename(self.src / f"step-{self.steps:02d}")
        self.steps += 1
        self.q.processAllAvailable()

    def stop(self) -> None:
        self.progress += [json.loads(p.json) for p in self.q.recentProgress]
        self.q.stop()

    def data_batches(self) -> int:
        return len([p for p in self.progress if p["numInputRows"] > 0])

    def op_metrics(self, name: str) -> list[dict]:
        return [op["customMetrics"] for p in self.progress for op in p.get("stateOperators", [])
                if op["operatorName"] == name]

    def run(self) -> "Run":
        interval = self.combo.interval
        self.start(interval)
        for step in self.combo.steps[:-1]:
            self.feed(step)
        self.stop()
        self.held_at_stop = [m.get("emitCacheBytes", 0) for m in self.op_metrics("emitCache")][-1:]
        self.start("1ms" if interval != "0" else "0")  # held rows are due now
        self.feed(self.combo.steps[-1])
        self.stop()
        if self.combo.keeps_late:
            t0 = int(T0.timestamp())
            self.late = sorted((int(r.t) - t0, r.user) for r in self.spark.read.schema("ts timestamp, user string")
                               .json(str(self.root / "late")).selectExpr("CAST(ts AS LONG) AS t", "user").collect())
        return self


def smallest_file_bytes(steps: list[list[list[tuple[int, str]]]]) -> int:
    return min(len("".join(json.dumps({"ts": iso(t), "user": u}) + "\n" for t, u in f).encode())
               for step in steps for f in step)


@dataclass(frozen=True)
class Combo:
    provider: str
    record_cache: bool
    query: str
    interval: str
    bound: bool

    @property
    def sessions(self) -> bool:
        return self.query.startswith("session_")

    @property
    def keeps_late(self) -> bool:
        """until_window_closes keeps its late records where the input bound is on (half the cells)."""
        return self.query == "window_closes" and self.bound

    @property
    def steps(self) -> list[list[list[tuple[int, str]]]]:
        """The input, step by step; the last step closes every data window or session."""
        return SESSION_ALL_STEPS if self.sessions else ALL_STEPS

    @property
    def id(self) -> str:
        return "-".join([self.provider, "cache" if self.record_cache else "nocache", self.query,
                         f"interval{self.interval}", "bound" if self.bound else "nobound"])


# dev/test's cross-version subset runs a quarter of the matrix on each other minor, one commit interval
# (SLUICE_MATRIX_INTERVALS=0 or 1h) and one input bound (SLUICE_MATRIX_BOUNDS=off or on) each; in CI
# the default minor runs the other two quarters (SLUICE_MATRIX_CELLS="0:on,1h:off", interval:bound
# pairs), so each combination runs once on every stop. Unset, the whole matrix runs.
INTERVALS = os.environ.get("SLUICE_MATRIX_INTERVALS", "0,1h").split(",")
BOUND = {"off": False, "on": True}
BOUNDS = [BOUND[b] for b in os.environ.get("SLUICE_MATRIX_BOUNDS", "off,on").split(",")]
CELLS = {(i, BOUND[b]) for i, b in
         (cell.split(":") for cell in os.environ.get("SLUICE_MATRIX_CELLS", "").split(",") if cell)}
COMBOS = [Combo(p, c, q, i, b) for p in PROVIDERS for c in (False, True) for q in QUERIES
          for i in INTERVALS for b in BOUNDS if not CELLS or (i, b) in CELLS]
WORKERS = int(os.environ.get("SLUICE_MATRIX_WORKERS", "4"))


def run_all(spark: SparkSession, root: Path, combos: list[Combo]) -> dict[Combo, Any]:
    """Runs the combinations, WORKERS at a time (each run waits on its own micro-batches most of
    the time), and returns each one's Run or the exception it raised."""
    def one(combo: Combo) -> Any:
        try:
            return Run(spark, root / combo.id, combo).run()
        except Exception as e:  # reported by the combination's own test
            return e
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        return dict(zip(combos, pool.map(one, combos)))


def check(run: Any, combo: Combo) -> None:
    """What every combination must emit (see test_composition.py's module doc), or the exception its run raised."""
    if isinstance(run, Exception):
        raise run
    if combo.interval != "0" and combo.query in ("update", "session_updates"):
        # the 1 h interval outlasts the first run: the emission cache held rows when it stopped
        assert run.held_at_stop and run.held_at_stop[0] > 0
    # the bound splits every step into one batch per file; without it a step is one batch
    files = sum(len(s) for s in combo.steps)
    assert run.data_batches() == (files if combo.bound else len(combo.steps))
    if combo.record_cache:
        # session state is read by prefix scans, which the cache serves by flushing to its delegate
        used = "cacheFlushes" if combo.sessions else "cacheMisses"
        assert sum(m.get(used, 0) for p in run.progress for op in p.get("stateOperators", [])
                   for m in [op["customMetrics"]]) > 0, "the record cache was not in use"
    if combo.sessions:
        check_sessions(run.emitted, combo)
        return

    truth = {(start_string(w), u): n for (w, u), n in COUNTS.items()}
    got = run.emitted
    if combo.query == "window_closes":
        closed = {(start_string(w), u) for (w, u) in COUNTS if w + WINDOW_S <= FINAL_WM}
        assert sorted(got) == sorted((s, u, n) for (s, u), n in truth.items() if (s, u) in closed)
        if combo.keeps_late:  # each late event kept once, as many as the operators counted
            assert run.late == LATE_EVENTS
            assert sum(op.get("numRowsDroppedByWatermark", 0) for p in run.progress
                       for op in p.get("stateOperators", [])) == LATE
        return
    last: dict[tuple[str, str], int] = {}
    for s, u, n in got:
        assert n <= truth[(s, u)], f"{(s, u)} emitted {n}, more than its {truth[(s, u)]} events"
        last[(s, u)] = n
    if combo.query == "time_limit":  # the last step's rows wait for stream time that never comes
        truth = {(start_string(w), u): n for (w, u), n in COUNTS.items() if (w, u) in DATA_KEYS}
        last = {k: v for k, v in last.items() if k in truth}
    assert last == truth


def check_sessions(got: list[tuple], combo: Combo) -> None:
    if combo.query == "session_finals":
        assert sorted(got) == sorted((*k, n) for k, n in SESSIONS.items())
        return
    table: dict[tuple, int] = {}
    for start, end, user, n in got:
        if n is None:  # a retraction (the emission cache may forward one of a session it never sent)
            table.pop((start, end, user), None)
        else:
            table[(start, end, user)] = n
    closing = {u for f in SESSION_ALL_STEPS[-1] for _, u in f}
    last_start = start_string(min(t for f in SESSION_ALL_STEPS[-1] for t, _ in f))
    # the closing step's own sessions stay open
    assert {k: n for k, n in table.items() if not (k[2] in closing and k[0] >= last_start)} == SESSIONS
