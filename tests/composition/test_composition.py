"""Features compose (issues 11 and 23): one deterministic input through every combination of
state store provider {HDFS-backed, RocksDB, in-memory window store} x record cache {off, on} x
query {update-mode windowed count, suppress until_window_closes, suppress until_time_limit,
update-mode session windows, suppress until_window_closes over session windows} x
commit interval {0, 1 h} x input bound {off, small}, each result compared with what Python
computes from the input. Where the input bound is on, until_window_closes keeps its late records,
which must be exactly the input's late events.

The input is a few steps of two JSON files each, with out-of-order and late events, moved into
the source folder one step at a time (one directory rename, so the source sees a step at once).
Without a bound a step is one micro-batch; the small bound (smaller than any file) splits it into
one batch per file. Which events are late (window end <= watermark) is decided by the watermark at
the start of a step and is the same for any split of the step (the generator drops events for
which it would not be), so one expectation serves both bounds.

Each query runs all data steps, is stopped, restarted on its checkpoint and fed a last step with
events far in the future for many keys: it closes every data window (final results), moves every
suppress partition's stream time past the time limit, and, with the interval set, is processed with
a 1 ms interval so that the rows the emission cache held (1 h is longer than any run, however slow the machine) are forwarded.
Expected:
- until_window_closes: each closed (window, user) exactly once, with its count; nothing else;
- until_time_limit and the plain count: the last row emitted per (window, user) carries its count,
  no row ever exceeds it, and no (window, user) is missing.
- session windows: the session queries read an input of their own with no late event (every event
  after the largest before it minus the watermark delay), so the sessions do not depend on where
  batch boundaries fall; update mode's rows (a retraction: null count), applied to a table keyed
  by (session, user), end at every session of the input, which the last step closes; under
  suppress each of those sessions arrives exactly once, and nothing else.
No combination is dropped: each dimension changes a different operator or store under the others.
"""
from __future__ import annotations

from typing import Any, Iterator

import pytest
from pyspark.sql import SparkSession

from support.composition import (
    CACHE_BYTES,
    COMBOS,
    COUNTS,
    DATA_KEYS,
    FINAL_WM,
    LATE,
    SESSION_GAP_S,
    SESSION_STEPS,
    SESSIONS,
    STEPS,
    WINDOW_S,
    Combo,
    check,
    run_all,
)
from support.crash_soak import bridging_events
from support.session import sluice_session

# dev/test: run on every supported Spark minor
pytestmark = [pytest.mark.every_minor, pytest.mark.every_combination]  # the cells: SLUICE_MATRIX_*


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    yield sluice_session(statestore_cache_max_bytes=CACHE_BYTES)


def test_the_input_exercises_what_the_matrix_needs() -> None:
    assert LATE >= 2  # late events are dropped, not counted
    closed = [k for k in COUNTS if k[0] + WINDOW_S <= FINAL_WM]
    assert set(closed) == DATA_KEYS and len(closed) >= 8  # the last step closes every data window
    # sessions: several per user, some of several events, an event bridging two earlier sessions
    assert len(SESSIONS) >= 6 and max(SESSIONS.values()) >= 3
    assert bridging_events([f for step in SESSION_STEPS for f in step], SESSION_GAP_S) > 0
    assert any(n > 1 for n in COUNTS.values())  # keys are updated more than once
    # events out of order inside a step and across files
    assert any(a[0] > b[0] for step in STEPS for f in step for a, b in zip(f, f[1:]))


@pytest.fixture(scope="module")
def runs(spark: SparkSession, request: pytest.FixtureRequest,
         tmp_path_factory: pytest.TempPathFactory) -> dict[Combo, Any]:
    """Every selected combination's Run (see run_all)."""
    selected = [item.callspec.params["combo"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec") and "combo" in item.callspec.params]
    return run_all(spark, tmp_path_factory.mktemp("matrix"), selected)


@pytest.mark.parametrize("combo", COMBOS, ids=[c.id for c in COMBOS])
def test_composition(runs: dict[Combo, Any], combo: Combo) -> None:
    check(runs[combo], combo)

