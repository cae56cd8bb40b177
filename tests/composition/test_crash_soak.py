"""Crash soak, short version (the long one is dev/soak): a driver running a suppress pipeline per
provider, with the record cache and a commit interval on, SIGKILLed twice at random seeded moments
and restarted on its checkpoints; no final result lost or duplicated, and every replayed batch id
wrote what its first attempt wrote. The same for session windows (every change, and final results
under suppress), on input without late events. See tests/support/crash_soak.py. On Spark 4.3, a real-time
suppress pipeline killed twice while events arrive (tests/support/realtime_soak.py)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from support.crash_soak import (
    DELEGATES,
    SESSION_DELAY_S,
    bridging_events,
    expected,
    expected_sessions,
    make_files,
    make_session_files,
    run_one,
)

# dev/test: the marker dev/test selects this module by
pytestmark = pytest.mark.soak
SUPPORT = Path(__file__).resolve().parents[1] / "support"  # the child processes' scripts


def test_expectation_covers_late_and_out_of_order_events() -> None:
    files = make_files(seed=7, n=12)
    want = expected(files)
    events = sum(len(f) for f in files[:-1])
    assert sum(want.values()) < events  # some events are late and dropped
    assert len(want) >= 10
    assert any(a[0] > b[0] for f in files for a, b in zip(f, f[1:]))


@pytest.mark.other_minor  # CI: in 4.2's half (marker soak), not again on the default minor
def test_kills_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    stats = run_one(tmp_path, DELEGATES, kills=2, seed=1)
    assert stats.kills == 2
    assert (stats.lost, stats.duplicated, stats.replay_mismatches) == (0, 0, 0), "\n".join(stats.details)


def test_session_input_has_no_late_event_and_bridges_sessions() -> None:
    files = make_session_files(seed=1, n=7)  # the input of the kill test below
    newest = None
    for events in files:
        for t, _ in events:
            # after every watermark Spark can have had (largest event time before it minus the delay)
            assert newest is None or t > newest - SESSION_DELAY_S
            newest = t if newest is None else max(newest, t)
    assert any(a[0] > b[0] for f in files for a, b in zip(f, f[1:]))  # out of order
    assert bridging_events(files) > 0  # the update-mode pipelines retract merged sessions
    want = expected_sessions(files)
    assert len(want) >= 10 and max(want.values()) > 1


@pytest.mark.sessions  # every session test runs on the default minor
def test_session_kills_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    stats = run_one(tmp_path, DELEGATES, kills=2, seed=1, kind="sessions")
    assert stats.kills == 2
    assert (stats.lost, stats.duplicated, stats.replay_mismatches) == (0, 0, 0), "\n".join(stats.details)


@pytest.mark.spark("4.3", reason="stateful real-time mode arrived in Spark 4.3")
@pytest.mark.kafka
def test_real_time_kills_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    # its own process: the soak's session needs the Kafka connector on a driver class path of its own
    r = subprocess.run([sys.executable, str(SUPPORT / "realtime_soak.py"), "--kills", "2",
                        "--seed", "1", "--root", str(tmp_path)],
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0 and "2 kills, lost 0, duplicated 0, replay mismatches 0" in r.stdout, \
        r.stdout[-4000:] + r.stderr[-2000:]
