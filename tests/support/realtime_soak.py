"""Real-time crash soak (issue 22): SIGKILL a driver running a real-time final-results pipeline
(tests/support/realtime_kill_child.py: windowed count + suppress until_window_closes under
`trigger(realTime=...)`, written per batch by an idempotent `ForeachWriter`) at random seeded
moments while events keep arriving, restart it on its checkpoint each time, then let a last run
catch up, and count what went wrong:

- lost: final results that never arrived with their true count;
- duplicated: final results that arrived more than once, or that should not have arrived at all;
- replay mismatches: batches whose killed attempt wrote rows that are not a prefix of what the
  batch's rerun wrote (one upstream task feeds the suppress partition, so a rerun sees the same rows
  in the same order and must decide the same).

Events are in event-time order (none late), so the expected finals depend only on how many were sent.

Used by tests/composition/test_crash_soak.py (short, Spark 4.3) and `dev/soak --realtime` (long):
    python tests/support/realtime_soak.py --kills 20 [--seed 1] [--root DIR] [--setting KEY=VALUE ...]
prints `N kills, lost L, duplicated D, replay mismatches R` and exits non-zero if any is non-zero.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, for `support`

from support import kafka as kh  # noqa: E402
from support.crash_soak import Stats, soak_main  # noqa: E402
from support.realtime_kill_child import (  # noqa: E402
    expected_finals,
    file_rows,
    first_batch_committed,
    later_batch_opened,
    produce_events,
    session,
)
from support.session import parse_settings, setting_args  # noqa: E402

CHILD = Path(__file__).parent / "realtime_kill_child.py"
TOPIC = "events"
PER_RUN = 40  # events sent before each run: 4 windows of 10 s


def _start(bootstrap: str, ckpt: Path, out: Path, log: Path, settings: dict[str, str]) -> subprocess.Popen:
    with open(log, "ab") as f:
        return subprocess.Popen([sys.executable, str(CHILD), bootstrap, TOPIC, str(ckpt), str(out),
                                 *setting_args(settings)],
                                stdout=f, stderr=subprocess.STDOUT, start_new_session=True)


def _kill(child: subprocess.Popen) -> None:
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.endswith("}")]


def check(out: Path, sent: int) -> Stats:
    stats = Stats()
    want = expected_finals(sent - 1)
    got = Counter(file_rows(out))
    for row, times in got.items():
        if row not in want:
            stats.duplicated += times
            stats.details.append(f"unexpected {row} x{times}")
        elif times > 1:
            stats.duplicated += times - 1
            stats.details.append(f"{row} arrived {times} times")
    for row in want - set(got):
        stats.lost += 1
        stats.details.append(f"lost {row}")
    for attempt in sorted((out / "attempts").glob("*.jsonl")) if (out / "attempts").exists() else []:
        final = out / f"{attempt.name[:5]}-{attempt.name.split('-')[1]}.jsonl"
        before, after = _lines(attempt), _lines(final)
        stats.replayed_batches += 1
        if after[:len(before)] != before:
            stats.replay_mismatches += 1
            stats.details.append(f"batch {attempt.name} replayed differently: {before} then {after}")
    return stats


def soak(root: Path, kills: int, seed: int, verbose: bool = False, timeout: float = 300.0,
         settings: dict[str, str] | None = None) -> Stats:
    """`kills` kills of the child (with `settings` added to its session), then a run that catches up."""
    settings = settings or {}
    rnd = random.Random(seed)
    broker = kh.Broker(root / "kafka").start()
    spark = session()
    try:
        kh.create_topic(spark, broker.bootstrap, TOPIC, 1)
        ckpt, out, log = root / "ckpt", root / "out", root / "child.log"
        out.mkdir()
        sent = 0
        stats = Stats()
        for k in range(kills + 1):
            produce_events(spark, broker.bootstrap, TOPIC, sent, PER_RUN)
            sent += PER_RUN
            child = _start(broker.bootstrap, ckpt, out, log, settings)
            want = expected_finals(sent - 1)
            new = want - expected_finals(sent - PER_RUN - 1)  # this run's finals
            deadline = time.monotonic() + timeout
            try:
                if k < kills:
                    # killed at a random moment after it has written some of this run's finals: inside a
                    # batch, between batches, or while a batch commits
                    target = rnd.randint(1, len(new))
                    # ...but not before the query's first batch has committed (first_batch_committed says why)
                    while len(set(file_rows(out)) & new) < target or not first_batch_committed(ckpt):
                        if child.poll() is not None or time.monotonic() > deadline:
                            raise RuntimeError(f"real-time soak child stopped or stalled; see {log}")
                        time.sleep(0.05)
                    time.sleep(rnd.uniform(0.0, 3.0))  # up to a batch and a half
                    stats.kills += 1
                else:
                    # the last run: every final out, and a later batch opened (a repeat would be written by then)
                    while True:
                        if want <= set(file_rows(out)) and later_batch_opened(out):
                            break
                        if child.poll() is not None or time.monotonic() > deadline:
                            raise RuntimeError(f"real-time soak child stopped or stalled; see {log}")
                        time.sleep(0.1)
            finally:
                _kill(child)
            if verbose:
                print(f"run {k}: {sent} events sent, {len(set(file_rows(out)))} distinct finals written", flush=True)
        stats.add(check(out, sent))
        return stats
    finally:
        broker.stop()


def main() -> int:
    return soak_main(__doc__, "sluice-rt-soak-", lambda p: p.add_argument("--kills", type=int, default=20),
                     lambda root, a: soak(root, a.kills, a.seed, verbose=True, settings=parse_settings(a.setting)))


if __name__ == "__main__":
    sys.exit(main())
