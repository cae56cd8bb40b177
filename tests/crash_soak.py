"""Crash soak (issue 11): SIGKILL a driver running final-results pipelines (tests/soak_child.py:
windowed count + suppress until_window_closes, one per provider under the record cache, commit
interval 30 s, idempotent foreachBatch sinks) at random seeded moments, restart it on the same checkpoint each time, let a
last run drain the input, and count what went wrong:

- lost: (window, user) final results that never arrived with their true count;
- duplicated: final results that arrived more than once, or that should not have arrived at all;
- replay mismatches: batch ids whose attempts (one per run that reached the sink) differ.

The expectation is computed here from the input and from what the checkpoint says each
micro-batch was: its files (the file source's log) and its watermark (the offset log). Spark drops
an event as late when its window end <= the watermark of the batch before. Input files are all
written before the first start, one file per micro-batch (maxFilesPerTrigger=1), so file i is
usually batch i; but a kill after the file source logged its next file and before the offset log
named the batch leaves that file to be read in one batch with the following one, with the older
watermark. So which events are late is read back from the checkpoint, not assumed; the generator
still keeps only events that a watermark one file earlier or later would classify the same way.

Used by tests/test_crash_soak.py (short) and dev/soak (long):
    python tests/crash_soak.py --kills 50 [--kills-per-run 5] [--seed 1] [--root DIR]
prints `N kills, lost L, duplicated D, replay mismatches R` and exits non-zero if any is non-zero.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

DELEGATES = ["hdfs", "rocksdb", "in_memory_window"]
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
WINDOW_S = 10  # as in soak_child.py
DELAY_S = 5
USERS = ["u0", "u1", "u2", "u3", "u4"]
CHILD = Path(__file__).parent / "soak_child.py"


def make_files(seed: int, n: int) -> list[list[tuple[int, str]]]:
    """`n` data files of (seconds after T0, user) events, time moving ~3 s a file, up to 8 s out of
    order, some events late; then one file far in the future that closes every data window."""
    rnd = random.Random(seed)
    files: list[list[tuple[int, str]]] = []
    maxes: list[int] = []  # largest time through each file
    for i in range(n):
        base = 20 + 3 * i
        events = [(base + rnd.randint(-8, 3), rnd.choice(USERS)) for _ in range(rnd.randint(3, 6))]
        if i >= 4 and rnd.random() < 0.4:
            events.append((maxes[i - 2] - DELAY_S - WINDOW_S - rnd.randint(0, 6), rnd.choice(USERS)))
        lag = maxes[i - 2] - DELAY_S if i >= 2 else None  # watermark of the batch before
        nolag = maxes[i - 1] - DELAY_S if i >= 1 else None  # watermark of this batch

        def late(t: int, wm: int | None) -> bool:
            return wm is not None and (t - t % WINDOW_S) + WINDOW_S <= wm
        events = [e for e in events if late(e[0], lag) == late(e[0], nolag)] or [(maxes[-1] + 1, rnd.choice(USERS))]
        files.append(events)
        maxes.append(max([t for t, _ in events] + maxes[-1:]))
    far = maxes[-1] + 20 * WINDOW_S
    files.append([(far, u) for u in USERS])
    return files


def expected(files: list[list[tuple[int, str]]]) -> dict[tuple[str, str], int]:
    """Final (window start, user) -> count of every window the last file closes."""
    counts: Counter[tuple[int, str]] = Counter()
    maxes: list[int] = []
    for i, events in enumerate(files):
        wm = maxes[i - 2] - DELAY_S if i >= 2 else None
        for t, u in events:
            w = t - t % WINDOW_S
            if wm is None or w + WINDOW_S > wm:
                counts[(w, u)] += 1
        maxes.append(max([t for t, _ in events] + maxes[-1:]))
    final_wm = maxes[-1] - DELAY_S
    return {(start_string(w), u): n for (w, u), n in counts.items() if w + WINDOW_S <= final_wm}


def late_watermarks(ckpt: Path) -> dict[str, int]:
    """Input file name -> the watermark (seconds after T0) Spark judged its events late by, read from
    the query's checkpoint: the batch that read the file (file source log, offset log) and the
    watermark of the batch before it (offset log; none for batch 0)."""
    source_batch: dict[str, int] = {}
    for path in (ckpt / "sources" / "0").iterdir():
        if path.name.startswith("."):
            continue
        for line in path.read_text().splitlines()[1:]:
            entry = json.loads(line)
            source_batch[Path(entry["path"]).name] = entry["batchId"]
    batches: list[tuple[int, int, int]] = []  # (batch id, watermark ms, last source batch read)
    for path in (ckpt / "offsets").iterdir():
        if path.name.isdigit():
            lines = path.read_text().splitlines()
            batches.append((int(path.name), json.loads(lines[1])["batchWatermarkMs"],
                            json.loads(lines[2])["logOffset"]))
    batches.sort()
    watermark_ms = {b: wm for b, wm, _ in batches}
    t0_ms = int(T0.timestamp() * 1000)
    result: dict[str, int] = {}
    for name, k in source_batch.items():
        batch = next(b for b, _, last in batches if last >= k)
        wm = watermark_ms.get(batch - 1, 0)
        result[name] = (wm - t0_ms) // 1000 if wm > 0 else -(10 ** 9)
    return result


def expected_from_checkpoint(files: list[list[tuple[int, str]]], ckpt: Path) -> dict[tuple[str, str], int]:
    """As `expected`, with each file's events judged late by the watermark its batch really had."""
    late_wm = late_watermarks(ckpt)
    counts: Counter[tuple[int, str]] = Counter()
    maxes: list[int] = []
    for i, events in enumerate(files):
        wm = late_wm[f"{i:04d}.json"]
        for t, u in events:
            w = t - t % WINDOW_S
            if w + WINDOW_S > wm:
                counts[(w, u)] += 1
        maxes.append(max([t for t, _ in events] + maxes[-1:]))
    final_wm = maxes[-1] - DELAY_S
    return {(start_string(w), u): n for (w, u), n in counts.items() if w + WINDOW_S <= final_wm}


def files_per_batch(ckpt: Path) -> Counter[int]:
    """How many input files each micro-batch read (from the offset log)."""
    offsets = sorted((int(p.name), json.loads(p.read_text().splitlines()[2])["logOffset"])
                     for p in (ckpt / "offsets").iterdir() if p.name.isdigit())
    return Counter(last - prev for (_, prev), (_, last) in zip([(-1, -1)] + offsets, offsets))


def start_string(t: int) -> str:
    return (T0 + timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S")


def write_input(src: Path, files: list[list[tuple[int, str]]]) -> None:
    src.mkdir(parents=True)
    now = time.time() - len(files)
    for i, events in enumerate(files):
        path = src / f"{i:04d}.json"
        path.write_text("".join(json.dumps({"ts": (T0 + timedelta(seconds=t)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                                            "user": u}) + "\n" for t, u in events))
        os.utime(path, (now + i, now + i))  # the file source takes files in this order


@dataclass
class Stats:
    kills: int = 0
    lost: int = 0
    duplicated: int = 0
    replay_mismatches: int = 0
    replayed_batches: int = 0
    merged_batches: int = 0  # micro-batches that read more than one input file
    details: list[str] = field(default_factory=list)

    def add(self, other: "Stats") -> None:
        self.kills += other.kills
        self.lost += other.lost
        self.duplicated += other.duplicated
        self.replay_mismatches += other.replay_mismatches
        self.replayed_batches += other.replayed_batches
        self.merged_batches += other.merged_batches
        self.details += other.details

    def line(self) -> str:
        return (f"{self.kills} kills, lost {self.lost}, duplicated {self.duplicated}, "
                f"replay mismatches {self.replay_mismatches}")


def _start(src: Path, ckpt: Path, out: Path, delegates: list[str], mode: str, log: Path) -> subprocess.Popen:
    with open(log, "ab") as f:
        return subprocess.Popen([sys.executable, str(CHILD), str(src), str(ckpt), str(out), ",".join(delegates),
                                 mode], stdout=f, stderr=subprocess.STDOUT, start_new_session=True)


def _attempts(out: Path) -> int:
    return sum(1 for _ in out.glob("*/attempts/*.json"))


def run_one(root: Path, delegates: list[str], kills: int, seed: int, timeout: float = 900.0) -> Stats:
    """One child process running a pipeline per delegate on fresh checkpoints: `kills` SIGKILLs
    at random moments, then a run that drains the input."""
    rnd = random.Random(seed)
    files = make_files(seed, n=3 * kills + 6)
    src, ckpt, out, log = root / "in", root / "ckpt", root / "out", root / "child.log"
    write_input(src, files)
    out.mkdir()
    stats = Stats()
    for _ in range(kills):
        child = _start(src, ckpt, out, delegates, "run", log)
        try:
            # progress-driven, then a random delay, so kills land in every phase of a batch:
            # planning, tasks and state commits, the sink, the commit log
            target = _attempts(out) + rnd.randint(1, 2 * len(delegates))
            deadline = time.monotonic() + timeout
            while _attempts(out) < target:
                if child.poll() is not None:
                    raise RuntimeError(f"soak child exited with {child.returncode}; see {log}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"soak child made no progress in {timeout} s; see {log}")
                time.sleep(0.05)
            time.sleep(rnd.uniform(0.0, 1.5))
        finally:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        stats.kills += 1
    child = _start(src, ckpt, out, delegates, "drain", log)
    try:
        if child.wait(timeout=timeout) != 0:
            raise RuntimeError(f"soak drain run exited with {child.returncode}; see {log}")
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    for d in delegates:
        want = expected_from_checkpoint(files, ckpt / d)
        merged = sum(n for size, n in files_per_batch(ckpt / d).items() if size > 1)
        if merged == 0 and want != expected(files):  # the two ways to the expectation must agree
            raise AssertionError(f"{d} seed {seed}: expectation from the checkpoint differs from the input's")
        stats.merged_batches += merged
        stats.add(check(out / d, want, f"{d} seed {seed}"))
    return stats


def check(out: Path, want: dict[tuple[str, str], int], label: str) -> Stats:
    stats = Stats()
    got: Counter[tuple[str, str, int]] = Counter()
    for path in sorted(out.glob("batch-*.json")):
        for start, user, n in json.loads(path.read_text()):
            got[(start, user, n)] += 1
    by_key: Counter[tuple[str, str]] = Counter()
    for (start, user, n), times in got.items():
        by_key[(start, user)] += times
        if want.get((start, user)) != n:
            stats.duplicated += times  # a result that should not have arrived (wrong count or window)
            stats.details.append(f"{label}: unexpected {(start, user, n)} x{times}")
    for key, n in want.items():
        if got[(key[0], key[1], n)] == 0:
            stats.lost += 1
            stats.details.append(f"{label}: lost {key} = {n}")
        elif got[(key[0], key[1], n)] > 1:
            stats.duplicated += got[(key[0], key[1], n)] - 1
            stats.details.append(f"{label}: {key} = {n} arrived {got[(key[0], key[1], n)]} times")
    attempts: dict[str, list[str]] = {}
    for path in sorted((out / "attempts").glob("batch-*-attempt-*.json")):
        batch = path.name.split("-attempt-")[0]
        attempts.setdefault(batch, []).append(path.read_text())
    for batch, texts in attempts.items():
        if len(texts) > 1:
            stats.replayed_batches += 1
            if any(t != texts[0] for t in texts[1:]):
                stats.replay_mismatches += 1
                stats.details.append(f"{label}: {batch} replayed differently: {texts}")
    return stats


def soak(root: Path, kills: int, kills_per_run: int, seed: int, delegates: list[str] = DELEGATES,
         verbose: bool = False) -> Stats:
    """`kills` kills in runs of `kills_per_run`, each run a child with one pipeline per delegate on
    fresh checkpoints."""
    total = Stats()
    run = 0
    while total.kills < kills:
        n = min(kills_per_run, kills - total.kills)
        t = time.monotonic()
        s = run_one(root / f"run-{run:03d}", delegates, n, seed * 1000 + run)
        total.add(s)
        if verbose:
            print(f"run {run} (seed {seed * 1000 + run}): {s.line()}, replayed batches {s.replayed_batches}, "
                  f"batches of several files {s.merged_batches}, {time.monotonic() - t:.0f} s", flush=True)
        run += 1
    return total


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=50)
    p.add_argument("--kills-per-run", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--root", help="working folder (kept); a temporary one (removed) by default")
    args = p.parse_args()
    root = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="sluice-soak-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        stats = soak(root, args.kills, args.kills_per_run, args.seed, verbose=True)
    finally:
        if not args.root:
            shutil.rmtree(root, ignore_errors=True)
    for d in stats.details:
        print(d)
    print(stats.line())
    return 1 if stats.lost or stats.duplicated or stats.replay_mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
