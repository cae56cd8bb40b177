"""A checkpoint moves across Spark upgrades: written on the oldest supported minor, run on by each newer
one in turn, it gives what a query that ran on one Spark gives, for every sluice provider and
feature that keeps state.

Each scenario is one query on one checkpoint: the record cache over hdfs and over rocksdb, with and
without write-behind (a 1 h commit interval on every minor but the last, so its write-behind files
still hold rows when Spark is upgraded; the emission cache holds rows then too), the emission cache
alone, the window store, suppress until_window_closes fused into the aggregation and buffered with
rows spilled to disk, and update-mode session windows. tests/support/upgrade_child.py runs every scenario's
query on its own checkpoint (a few at a time) in one process per minor, with that minor's virtualenv
(`dev/setup --print-venv --spark X`): 4.1 over the first input files, 4.2 over the next, 4.3 over
the rest. The last minor runs at interval 0: its first batch forwards what the emission cache held
and takes the logged rows into the delegate.

The input (one file per micro-batch) has no late event: every event is after the largest before it
minus the watermark delay, so the results do not depend on where batches or upgrades fall, and the
expectation is Python's from the input alone: the count per window and key (update mode: the last
row of each), each closed window's final result exactly once (suppress), the session windows
(update mode's changes applied to a table, a retraction deleting). Before each upgrade the test checks
that the state the next minor must read is there: open windows and sessions, rows in write-behind
files, rows the emission cache holds, rows spilled to disk.

Runs where every supported minor's virtualenv exists (CI: in the last minor's cross-version half);
skipped elsewhere, naming the missing virtualenv.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.upgrade

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).resolve().parents[1] / "support" / "upgrade_child.py"
MINORS = subprocess.run([str(ROOT / "dev" / "spark-versions")], check=True, capture_output=True,
                        text=True).stdout.split()  # oldest first

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
WINDOW_S = 10  # as in upgrade_child.py
DELAY_S = 5
SESSION_GAP_S = 3
KEYS = ["k0", "k1", "k2", "k3"]
FILES_PER_MINOR = 3


@dataclass(frozen=True)
class Scenario:
    query: str  # upgrade_child.QUERIES
    options: dict[str, Any]  # sluice.configure's
    interval: bool = False  # write-behind and the emission cache: 1 h, then 0 on the last minor
    checks: tuple[str, ...] = ()  # the state each upgrade must carry, besides open windows
    xfail: str | None = None

    def options_on(self, minor: str) -> dict[str, Any]:
        if not self.interval:
            return self.options
        return {**self.options, "commit_interval_ms": "0" if minor == MINORS[-1] else "1h"}


# A metric only the scenario's provider reports: the query ran on it.
PROVIDER_METRIC = {"cache": "cacheHits", "hdfs": "loadedMapCacheHitCount", "rocksdb": "rocksdbCommitCheckpointLatency",
                   "in_memory_window": "windowStoreSegments"}


def provider_metric(options: dict[str, Any]) -> str:
    return PROVIDER_METRIC["cache" if options.get("state_store_cache") else options["state_store"]]


def cache(delegate: str) -> dict[str, Any]:
    return {"state_store_cache": True, "statestore_cache_delegate": delegate}


SCENARIOS = {
    "record cache over hdfs": Scenario("count", cache("hdfs")),
    "record cache over rocksdb": Scenario("count", cache("rocksdb")),
    "record cache over hdfs, write-behind": Scenario("count", cache("hdfs"), interval=True,
                                                    checks=("writeBehindRows", "emitCacheBytes")),
    "record cache over rocksdb, write-behind": Scenario("count", cache("rocksdb"), interval=True,
                                                       checks=("writeBehindRows", "emitCacheBytes")),
    "emission cache over hdfs": Scenario("count", {"state_store": "hdfs"}, interval=True, checks=("emitCacheBytes",)),
    "window store": Scenario("count", {"state_store": "in_memory_window"}),
    "suppress fused": Scenario("fused", {"state_store": "rocksdb"}),
    "suppress buffered, spilled": Scenario("spilled", {"state_store": "hdfs"},
                                           checks=("suppressionDiskBufferBytes",)),
    "session windows in update mode": Scenario("sessions", {"state_store": "rocksdb"}),
}


# ---------------------------------------------------------------------------------------------
# input and expectations (times in seconds after T0)

def iso(t: int) -> str:
    return (T0 + timedelta(seconds=t)).strftime("%Y-%m-%dT%H:%M:%SZ")


def stamp(t: int) -> str:
    return (T0 + timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S")


def window_of(t: int) -> int:
    return t - t % WINDOW_S


def make_files(seed: int = 5, n: int = FILES_PER_MINOR * len(MINORS)) -> list[list[tuple[int, str]]]:
    """`n` files of (ts, key) events, time moving ~6 s a file, out of order by up to the watermark
    delay but never late (each event after the largest before it minus the delay), then a last file
    far ahead for every key, which closes every earlier window and session."""
    rnd = random.Random(seed)
    files: list[list[tuple[int, str]]] = []
    newest: int | None = None
    for i in range(n):
        base = 6 + 6 * i
        lo = base - 4 if newest is None else max(base - 4, newest - DELAY_S + 1)
        events = [(rnd.randint(lo, max(lo, base + 4)), rnd.choice(KEYS)) for _ in range(6)]
        files.append(events)
        newest = max([t for t, _ in events] + ([newest] if newest is not None else []))
    assert newest is not None
    far = window_of(newest) + 10 * WINDOW_S
    files.append([(far + i % 3, k) for i, k in enumerate(KEYS)])
    return files


FILES = make_files()


def phase_files(phase: int) -> list[int]:
    """The indexes of the files written before minor `phase` runs; the last minor takes the rest."""
    last = len(MINORS) - 1
    return list(range(FILES_PER_MINOR * phase, len(FILES) if phase == last else FILES_PER_MINOR * (phase + 1)))


def window_counts(files: list[list[tuple[int, str]]]) -> dict[tuple[str, str], int]:
    counts = Counter((stamp(window_of(t)), k) for f in files for t, k in f)
    return dict(counts)


def closed_windows(files: list[list[tuple[int, str]]]) -> dict[tuple[str, str], int]:
    """The windows the last watermark (the largest event time minus the delay) closes, with their counts."""
    wm = max(t for f in files for t, _ in f) - DELAY_S
    counts = Counter((window_of(t), k) for f in files for t, k in f)
    return {(stamp(w), k): n for (w, k), n in counts.items() if w + WINDOW_S <= wm}


def session_events(files: list[list[tuple[int, str]]]) -> list[tuple[str, list[int]]]:
    """Every session window's key and event times: an event at or before a session's end (its last
    event + the gap) joins it."""
    out: list[tuple[str, list[int]]] = []
    for k in KEYS:
        current: list[int] = []
        for t in sorted(t for f in files for t, key in f if key == k):
            if current and t > current[-1] + SESSION_GAP_S:
                out.append((k, current))
                current = []
            current.append(t)
        if current:
            out.append((k, current))
    return out


def sessions(files: list[list[tuple[int, str]]]) -> dict[tuple[str, str, str], int]:
    """(start, end, key) -> count of every session window."""
    return {(stamp(ts[0]), stamp(ts[-1] + SESSION_GAP_S), k): len(ts) for k, ts in session_events(files)}


def test_the_input_carries_state_across_every_upgrade() -> None:
    """Windows and sessions open at each upgrade get events after it; some windows are closed before
    it; events arrive out of order; an event merges two sessions."""
    assert len(MINORS) >= 2
    for phase in range(1, len(MINORS)):
        before = [FILES[i] for i in range(FILES_PER_MINOR * phase)]
        after = [FILES[i] for i in phase_files(phase)]
        assert set(window_counts(before)) & set(window_counts(after)), f"no window spans the upgrade to {MINORS[phase]}"
        last_before = max(t for f in before for t, _ in f)
        assert any(ts[0] <= last_before < ts[-1] for _, ts in session_events(before + after)), \
            f"no session spans the upgrade to {MINORS[phase]}"
        closed_then = closed_windows(before)
        assert closed_then and len(closed_then) < len(window_counts(before))
    assert len(closed_windows(FILES)) >= 20
    assert any(a[0] > b[0] for f in FILES for a, b in pairwise(f))
    # an event joining two sessions of the events before it (update mode retracts both)
    events = [e for f in FILES for e in f]
    assert any(len(sessions([events[:i + 1]])) < len(sessions([events[:i]])) for i in range(1, len(events)))


# ---------------------------------------------------------------------------------------------
# the runs

def venv_of(minor: str) -> Path:
    out = subprocess.run([str(ROOT / "dev" / "setup"), "--print-venv", "--spark", minor], check=True,
                         capture_output=True, text=True).stdout.strip()
    return Path(out)


@dataclass
class Upgraded:
    root: Path
    reports: list[dict[str, Any]] = field(default_factory=list)  # one per minor, oldest first


def write_files(src: Path, indexes: list[int]) -> None:
    """Files dated in order (the file source takes them by modification time), each whole at once."""
    for i in indexes:
        tmp = src / f".{i:03d}.json"  # the file source skips hidden files
        tmp.write_text("".join(json.dumps({"ts": iso(t), "k": k}) + "\n" for t, k in FILES[i]))
        os.utime(tmp, (1_700_000_000 + i, 1_700_000_000 + i))
        tmp.rename(src / f"{i:03d}.json")


def child_env() -> dict[str, str]:
    """The environment without what ties a process to this one's pyspark (the child compiles its
    test class path against its own)."""
    drop = {"SLUICE_TEST_CLASS_PATH", "SPARK_HOME", "PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"}
    return {k: v for k, v in os.environ.items() if k not in drop}


@pytest.fixture(scope="module")
def upgraded(tmp_path_factory: pytest.TempPathFactory) -> Upgraded:
    venvs = {minor: venv_of(minor) for minor in MINORS}
    missing = [f"{minor}: {v}" for minor, v in venvs.items() if not (v / "bin" / "python").exists()]
    if missing:
        pytest.skip("needs every supported minor's virtualenv (dev/setup --spark X); missing: " + ", ".join(missing))
    run = Upgraded(tmp_path_factory.mktemp("upgrade"))
    src = run.root / "in"
    src.mkdir()
    for phase, minor in enumerate(MINORS):
        write_files(src, phase_files(phase))
        scenarios = [{"name": name, "query": s.query, "options": s.options_on(minor),
                      "checkpoint": str(run.root / slug(name) / "ckpt"), "output": str(run.root / slug(name) / "out")}
                     for name, s in SCENARIOS.items()]
        job = {"input": str(src), "report": str(run.root / f"report-{minor}.json"), "scenarios": scenarios}
        job_file = run.root / f"job-{minor}.json"
        job_file.write_text(json.dumps(job))
        log = run.root / f"child-{minor}.log"
        with open(log, "w") as out:
            done = subprocess.run([str(venvs[minor] / "bin" / "python"), str(CHILD), str(job_file)], stdout=out,
                                  stderr=subprocess.STDOUT, env=child_env(), timeout=900)
        if done.returncode != 0:
            tail = log.read_text()[-4000:]
            pytest.fail(f"the child on Spark {minor} exited with {done.returncode}:\n{tail}")
        run.reports.append(json.loads((run.root / f"report-{minor}.json").read_text()))
    return run


def slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name)


def test_each_minor_ran_on_its_own_spark(upgraded: Upgraded) -> None:
    assert [r["pyspark"].rsplit(".", 1)[0] for r in upgraded.reports] == MINORS


def operators(progress: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {op["operatorName"]: op for op in progress.get("stateOperators", [])}


def rows_of(upgraded: Upgraded, name: str) -> list[tuple[str, str, str, int | None]]:
    """Every row the scenario's sink kept, in batch order: (start, end, key, count)."""
    out = upgraded.root / slug(name) / "out"
    return [(s, e, k, n) for p in sorted(out.glob("*.json")) for s, e, k, n in json.loads(p.read_text())]


def check(upgraded: Upgraded, name: str, scenario: Scenario) -> None:
    for minor, report in zip(MINORS, upgraded.reports, strict=True):
        result = report["scenarios"][name]
        assert "error" not in result, f"on Spark {minor}:\n{result['error']}"
    for phase, (minor, report) in enumerate(zip(MINORS, upgraded.reports, strict=True)):
        progress = report["scenarios"][name]["progress"]
        # each minor read its own files, one batch each
        assert len([p for p in progress if p["numInputRows"] > 0]) == len(phase_files(phase)), minor
        ops = operators(progress[-1])
        marker = provider_metric(scenario.options)
        assert any(marker in op["customMetrics"] for op in ops.values()), f"not on the provider asked for on {minor}"
        if phase == len(MINORS) - 1:
            break
        # what the next minor must read is in the checkpoint
        assert sum(op["numRowsTotal"] for op in ops.values()) > 0, f"no state at the upgrade from {minor}"
        for metric in scenario.checks:
            values = {op_name: op["customMetrics"][metric] for op_name, op in ops.items()
                      if metric in op["customMetrics"]}
            assert max(values.values(), default=0) > 0, f"{metric} at the upgrade from {minor}: {values}"
    got = rows_of(upgraded, name)
    plan = set(operators(upgraded.reports[-1]["scenarios"][name]["progress"][-1]))
    if scenario.query in ("fused", "spilled"):
        assert ("suppress" in plan) == (scenario.query == "spilled"), plan  # fused: no suppress operator
        # each closed window's final result once, nothing else
        assert Counter((s, k, n) for s, _, k, n in got) == Counter(
            (s, k, n) for (s, k), n in closed_windows(FILES).items())
    elif scenario.query == "sessions":
        table: dict[tuple[str, str, str], int] = {}
        for s, e, k, n in got:
            if n is None:
                table.pop((s, e, k), None)
            else:
                table[(s, e, k)] = n
        assert table == sessions(FILES)
    else:
        truth = window_counts(FILES)
        last: dict[tuple[str, str], int] = {}
        for s, _, k, n in got:
            assert n is not None and n <= truth[(s, k)], f"{(s, k)} emitted {n}, more than its {truth[(s, k)]} events"
            last[(s, k)] = n
        assert last == truth


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.xfail(strict=True, reason=s.xfail)] if s.xfail
                                               else []) for n, s in SCENARIOS.items()])
def test_a_checkpoint_runs_on_across_spark_upgrades(upgraded: Upgraded, name: str) -> None:
    check(upgraded, name, SCENARIOS[name])

