"""Crash soak (issue 11): SIGKILL a driver running final-results pipelines (tests/support/soak_child.py:
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

Session windows (kind `sessions`, every other run of dev/soak): per delegate an update-mode
`groupBy(session_window, user).count()` (tests/support/session_kill_child.py's query) whose rows a table
keyed by (user, session) upserts, deleting on a retraction (null count), must end exactly at the
closed sessions; and the same under suppress until_window_closes, each closed session exactly
once. Their input has no late event at all (every event within the watermark delay of the largest
before it), so the sessions, and which of them the last watermark closes, are the same wherever
the batch boundaries fall (a kill may merge two files into one batch): the expectation is computed
from the input alone, and checked against the watermarks the checkpoint records.

Used by tests/composition/test_crash_soak.py (short) and dev/soak (long):
    python tests/support/crash_soak.py --kills 50 [--kills-per-run 5] [--seed 1] [--root DIR] [--kinds windows,sessions]
        [--setting KEY=VALUE ...]
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
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for `support`, when run as a script
from support.session import parse_settings, setting_args  # noqa: E402

DELEGATES = ["hdfs", "rocksdb", "in_memory_window"]
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
WINDOW_S = 10  # as in soak_child.py
DELAY_S = 5
USERS = ["u0", "u1", "u2", "u3", "u4"]
CHILD = Path(__file__).parent / "soak_child.py"
KINDS = ["windows", "sessions"]
SESSION_GAP_S = 5  # as in session_kill_child.py
SESSION_DELAY_S = 10


def pipelines(kind: str, delegates: list[str]) -> list[str]:
    """The child's pipelines, each with its own checkpoint and output folder of this name: one per
    delegate for windows, two (every change, final results) for sessions."""
    return delegates if kind == "windows" else [f"{d}.{mode}" for d in delegates for mode in ("updates", "finals")]


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


def make_session_files(seed: int, n: int) -> list[list[tuple[int, str]]]:
    """`n` data files for the session pipelines: time moving ~4 s a file, out of order by up to
    SESSION_DELAY_S - 1 s but never late (each event after the largest before it minus the watermark
    delay, so after every watermark Spark can have), then one file far ahead closing every session."""
    rnd = random.Random(seed)
    files: list[list[tuple[int, str]]] = []
    newest = 20
    for i in range(n):
        events = []
        for _ in range(rnd.randint(4, 8)):
            t = max(newest - SESSION_DELAY_S + 1, 20 + 4 * i + rnd.randint(-SESSION_DELAY_S, 3))
            newest = max(newest, t)
            events.append((t, rnd.choice(USERS)))
        files.append(events)
    files.append([(newest + 20 * SESSION_GAP_S, u) for u in USERS])
    return files


def sessions_of(events: list[tuple[int, str]], gap: int = SESSION_GAP_S) -> dict[tuple[str, int, int], int]:
    """(user, start, end) -> count of the sessions `events` make, as Spark merges them: an event at
    or before a session's end (last event + gap) joins it."""
    out: dict[tuple[str, int, int], int] = {}
    for user in sorted({u for _, u in events}):
        current: list[int] = []  # [start, end, count]
        for t in sorted(t for t, u in events if u == user):
            if current and t <= current[1]:
                current[1], current[2] = max(current[1], t + gap), current[2] + 1
            else:
                if current:
                    out[(user, current[0], current[1])] = current[2]
                current = [t, t + gap, 1]
        out[(user, current[0], current[1])] = current[2]
    return out


def expected_sessions(files: list[list[tuple[int, str]]]) -> dict[tuple[str, str, str], int]:
    """(start, end, user) -> count of every session the last file's watermark closes (end at or
    below it). No event is late, so this is all of the input's sessions: no batch boundary matters."""
    events = [e for f in files for e in f]
    final_wm = max(t for t, _ in events) - SESSION_DELAY_S
    return {(start_string(start), start_string(end), user): n
            for (user, start, end), n in sessions_of(events).items() if end <= final_wm}


def bridging_events(files: list[list[tuple[int, str]]], gap: int = SESSION_GAP_S) -> int:
    """How many events, in arrival order, join two sessions that existed before them (each such
    event makes the update-mode query retract both)."""
    seen: list[tuple[int, str]] = []
    bridging = 0
    for events in files:
        for e in events:
            before = sessions_of(seen, gap)
            seen.append(e)
            if len(sessions_of(seen, gap)) < len(before):
                bridging += 1
    return bridging


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
    unseen_retractions: int = 0  # retractions of sessions whose rows never left the emission cache
    details: list[str] = field(default_factory=list)

    def add(self, other: "Stats") -> None:
        self.kills += other.kills
        self.lost += other.lost
        self.duplicated += other.duplicated
        self.replay_mismatches += other.replay_mismatches
        self.replayed_batches += other.replayed_batches
        self.merged_batches += other.merged_batches
        self.unseen_retractions += other.unseen_retractions
        self.details += other.details

    def add_replays(self, out: Path, label: str) -> "Stats":
        """Counts the batch ids the sink saw more than once and those whose attempts differ."""
        attempts: dict[str, list[str]] = {}
        for path in sorted((out / "attempts").glob("batch-*-attempt-*.json")):
            attempts.setdefault(path.name.split("-attempt-")[0], []).append(path.read_text())
        for batch, texts in attempts.items():
            if len(texts) > 1:
                self.replayed_batches += 1
                if any(t != texts[0] for t in texts[1:]):
                    self.replay_mismatches += 1
                    self.details.append(f"{label}: {batch} replayed differently: {texts}")
        return self

    def line(self) -> str:
        return (f"{self.kills} kills, lost {self.lost}, duplicated {self.duplicated}, "
                f"replay mismatches {self.replay_mismatches}")


def _start(src: Path, ckpt: Path, out: Path, delegates: list[str], kind: str, mode: str, log: Path,
           settings: dict[str, str]) -> subprocess.Popen:
    with open(log, "ab") as f:
        return subprocess.Popen([sys.executable, str(CHILD), str(src), str(ckpt), str(out), ",".join(delegates),
                                 mode, kind, *setting_args(settings)],
                                stdout=f, stderr=subprocess.STDOUT, start_new_session=True)


def _attempts(out: Path) -> int:
    return sum(1 for _ in out.glob("*/attempts/*.json"))


def run_one(root: Path, delegates: list[str], kills: int, seed: int, timeout: float = 900.0,
            kind: str = "windows", settings: dict[str, str] | None = None) -> Stats:
    """One child process running the `kind` pipelines of every delegate on fresh checkpoints, with
    `settings` (session settings) added to its session: `kills` SIGKILLs at random moments, then a run
    that drains the input."""
    settings = settings or {}
    rnd = random.Random(seed)
    # sessions: fewer, fuller files (twice the queries per child, so about the same time per run)
    files = make_files(seed, n=3 * kills + 6) if kind == "windows" else make_session_files(seed, n=2 * kills + 3)
    src, ckpt, out, log = root / "in", root / "ckpt", root / "out", root / "child.log"
    write_input(src, files)
    out.mkdir()
    names = pipelines(kind, delegates)
    stats = Stats()
    for _ in range(kills):
        child = _start(src, ckpt, out, delegates, kind, "run", log, settings)
        try:
            # progress-driven, then a random delay, so kills land in every phase of a batch:
            # planning, tasks and state commits, the sink, the commit log
            target = _attempts(out) + rnd.randint(1, 2 * len(names))
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
    child = _start(src, ckpt, out, delegates, kind, "drain", log, settings)
    try:
        if child.wait(timeout=timeout) != 0:
            raise RuntimeError(f"soak drain run exited with {child.returncode}; see {log}")
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    for p in names:
        merged = sum(n for size, n in files_per_batch(ckpt / p).items() if size > 1)
        stats.merged_batches += merged
        label = f"{p} seed {seed}"
        if kind == "windows":
            want = expected_from_checkpoint(files, ckpt / p)
            if merged == 0 and want != expected(files):  # the two ways to the expectation must agree
                raise AssertionError(f"{label}: expectation from the checkpoint differs from the input's")
            stats.add(check(out / p, want, label))
            continue
        late_wm = late_watermarks(ckpt / p)
        if any(t <= late_wm[f"{i:04d}.json"] for i, events in enumerate(files) for t, _ in events):
            raise AssertionError(f"{label}: an input event was late, so the expectation depends on the batches")
        want = expected_sessions(files)
        if p.endswith(".updates"):
            closed_by = start_string(max(t for f in files for t, _ in f) - SESSION_DELAY_S)
            stats.add(check_table(out / p, want, closed_by, label))
        else:
            stats.add(check(out / p, want, label))
    return stats


def batch_rows(out: Path) -> list[list]:
    """Every row the sink kept (the last attempt of each batch id), in batch order."""
    return [row for path in sorted(out.glob("batch-*.json")) for row in json.loads(path.read_text())]


def check(out: Path, want: dict[tuple, int], label: str) -> Stats:
    """Final results: rows [*key, count], each key of `want` exactly once with its count, nothing else."""
    stats = Stats()
    got: Counter[tuple] = Counter()
    for *key, n in batch_rows(out):
        got[(*key, n)] += 1
    for (*key, n), times in got.items():
        if want.get(tuple(key)) != n:
            stats.duplicated += times  # a result that should not have arrived (wrong count or window)
            stats.details.append(f"{label}: unexpected {(*key, n)} x{times}")
    for key, n in want.items():
        if got[(*key, n)] == 0:
            stats.lost += 1
            stats.details.append(f"{label}: lost {key} = {n}")
        elif got[(*key, n)] > 1:
            stats.duplicated += got[(*key, n)] - 1
            stats.details.append(f"{label}: {key} = {n} arrived {got[(*key, n)]} times")
    return stats.add_replays(out, label)


def check_table(out: Path, want: dict[tuple, int], closed_by: str, label: str) -> Stats:
    """Every change: rows [*key, count] applied in batch order to a table (a row upserts its key, a
    null count deletes it) must leave exactly `want` among the keys whose end (the key's second
    field) is at or below `closed_by`. A deletion of a key the table does not hold is a no-op for
    the table, counted apart: the emission cache forwards the retraction of a session whose updates
    it absorbed before forwarding any (see README, "Session windows in update mode")."""
    stats = Stats()
    table: dict[tuple, int] = {}
    for *key, n in batch_rows(out):
        if n is not None:
            table[tuple(key)] = n
        elif table.pop(tuple(key), None) is None:
            stats.unseen_retractions += 1
    closed = {k: n for k, n in table.items() if k[1] <= closed_by}
    for key in sorted(set(closed) | set(want)):
        if closed.get(key) != want.get(key):
            if key in want:
                stats.lost += 1
                stats.details.append(f"{label}: {key} = {want[key]}, the table has {closed.get(key)}")
            else:
                stats.duplicated += 1
                stats.details.append(f"{label}: the table keeps {key} = {closed[key]}, no such session")
    return stats.add_replays(out, label)


def soak(root: Path, kills: int, kills_per_run: int, seed: int, delegates: list[str] = DELEGATES,
         verbose: bool = False, kinds: list[str] = KINDS, settings: dict[str, str] | None = None) -> Stats:
    """`kills` kills in runs of `kills_per_run`, each run a child with the pipelines of one kind (in
    turn) per delegate on fresh checkpoints."""
    total = Stats()
    run = 0
    while total.kills < kills:
        n = min(kills_per_run, kills - total.kills)
        t = time.monotonic()
        kind = kinds[run % len(kinds)]
        s = run_one(root / f"run-{run:03d}", delegates, n, seed * 1000 + run, kind=kind, settings=settings)
        total.add(s)
        if verbose:
            print(f"run {run} ({kind}, seed {seed * 1000 + run}): {s.line()}, replayed batches {s.replayed_batches}, "
                  f"batches of several files {s.merged_batches}, retractions of unseen sessions {s.unseen_retractions}, "
                  f"{time.monotonic() - t:.0f} s", flush=True)
        run += 1
    return total


def soak_main(doc: str, prefix: str, add_arguments: Callable[[argparse.ArgumentParser], None],
              run: Callable[[Path, argparse.Namespace], Stats]) -> int:
    """The command line of a soak: `--seed`, `--root` and the soak's own arguments; prints what went
    wrong and the summary line; non-zero if anything was lost, duplicated or replayed differently."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE",
                   help="a session setting of the soaked driver (repeatable), e.g. spark.sluice.json.decoder=sluice")
    p.add_argument("--root", help="working folder (kept); a temporary one (removed) by default")
    add_arguments(p)
    args = p.parse_args()
    root = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix=prefix))
    root.mkdir(parents=True, exist_ok=True)
    try:
        stats = run(root, args)
    finally:
        if not args.root:
            shutil.rmtree(root, ignore_errors=True)
    for d in stats.details:
        print(d)
    print(stats.line())
    return 1 if stats.lost or stats.duplicated or stats.replay_mismatches else 0


def main() -> int:
    def arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--kills", type=int, default=50)
        p.add_argument("--kills-per-run", type=int, default=5)
        p.add_argument("--kinds", default=",".join(KINDS), help="pipelines the runs take in turn (comma-separated)")
    return soak_main(__doc__, "sluice-soak-", arguments, lambda root, a: soak(
        root, a.kills, a.kills_per_run, a.seed, verbose=True, kinds=a.kinds.split(","),
        settings=parse_settings(a.setting)))


if __name__ == "__main__":
    sys.exit(main())
