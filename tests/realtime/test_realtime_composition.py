"""spark-4.3: the composition matrix (test_composition.py) under Spark's real-time trigger, on Spark's
RocksDB provider (the only one Spark allows there): query {update-mode windowed count, suppress
until_window_closes, until_time_limit on stream time, until_wall_clock_time_limit, until_time_limit
with a bounded buffer that emits early} x emission cache interval {0, 1 s}. (The bounded buffer is
under until_time_limit: until_window_closes takes only strict buffers, an early row not being final.)

Each combination reads a topic of its own, produced before the query starts; runs until its output
meets the first expectation; is stopped, given more input that ends with an event closing every
window, restarted on its checkpoint and run to the final expectation, computed here from the input:
- until_window_closes: each closed (window, key) exactly once across both runs, with its count; nothing else;
- the plain count, until_time_limit, wall clock and the early-emitting buffer: the last row per
  (window, key) carries its count, a key's counts only grow from row to row (so none exceeds its
  count and none is emitted twice), and no (window, key) is missing (the closing event's own, still
  buffered by the stream-time suppressions, is required only of the count and wall clock);
- with the interval off, where every decision is per row on the one upstream task's row order: the
  exact rows, in order, that Kafka Streams would forward (one per record for the count; for
  until_time_limit, each key's latest row once stream time is the limit past its buffer time, and
  with the bound the oldest entries pushed out while it is exceeded, which this input makes happen).
  With the interval on, how many updates the cache absorbs depends on the task's clock: not asserted.
The output goes through `EpochFiles`, which replaces a batch's rows when the batch is rerun, so what is
read back is what the batches committed, whatever batch the stop interrupted.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Iterator

import pytest
from pyspark.sql import DataFrame, SparkSession

import sluice
from support import kafka as kh
from support import realtime_kill_child
from support.realtime_kill_child import (
    BASE,
    all_counts,
    expected_finals,
    file_rows,
    later_batch_opened,
    produce_events,
    start_to_files,
    timed_counts,
    windowed_counts,
)
from support.session import session_conf, stop_session

pytestmark = [pytest.mark.spark("4.3", reason="stateful real-time mode arrived in Spark 4.3"), pytest.mark.kafka,
              pytest.mark.every_combination]

PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
INTERVAL_KEY = "spark.sluice.commit.interval.ms"

# The input: one topic partition (so the upstream task's row order, on which every per-row decision
# depends, is the topic's), records i = 0, 1, ... with key k<i % 3> at BASE + i s, in event-time
# order. In order, no record is ever older than Spark's watermark (the largest event time seen before
# it minus 2 s), wherever real-time batch boundaries fall, so none is dropped as late and the counts
# do not depend on timing. The first run reads records 0..29 (windows ending at BASE + 10, 20, 30,
# the first two closed by record 29); the second 30..49 and then record FAR, 30 s after the last
# one: it moves stream time and the watermark past the end plus grace of every data window.
FIRST, MORE, FAR = 30, 20, 80
LAST = FIRST + MORE - 1
TIME_LIMIT_S = 5
WALL_LIMIT_S = 1
BOUND = 2  # entries: three keys a window, each held TIME_LIMIT_S after its buffer time, so the bound is exceeded


RECORDS = [*range(LAST + 1), FAR]  # in the order they are produced


def _window_key(i: int) -> tuple[str, int]:
    return f"k{i % 3}", BASE + (i // 10 + 1) * 10


FAR_KEY = _window_key(FAR)
FIRST_COUNTS = all_counts(FIRST - 1)
DATA_COUNTS = all_counts(LAST)
ALL_COUNTS = {**DATA_COUNTS, FAR_KEY: 1}
FIRST_FINALS = {(k, end): n for k, end, n in expected_finals(FIRST - 1)}


def _stream_time_limited(buffer: sluice.BufferConfig) -> Callable[[SparkSession, str, str], DataFrame]:
    return lambda spark, bootstrap, topic: sluice.suppress(
        timed_counts(spark, bootstrap, topic), sluice.Suppressed.until_time_limit(TIME_LIMIT_S, buffer), time_col="ts")


QUERIES: dict[str, Callable[[SparkSession, str, str], DataFrame]] = {
    "update": windowed_counts,
    "window_closes": lambda spark, bootstrap, topic: sluice.suppress(
        windowed_counts(spark, bootstrap, topic),
        sluice.Suppressed.until_window_closes(sluice.BufferConfig.unbounded())),
    "time_limit": _stream_time_limited(sluice.BufferConfig.unbounded()),
    "wall_clock": lambda spark, bootstrap, topic: sluice.suppress(
        windowed_counts(spark, bootstrap, topic),
        sluice.Suppressed.until_wall_clock_time_limit(WALL_LIMIT_S, sluice.BufferConfig.unbounded())),
    "emit_early": _stream_time_limited(sluice.BufferConfig.max_records(BOUND).emit_early_when_full()),
}
INTERVALS = {"interval_off": "0", "interval_on": "1000"}
# what each query's last rows hold after the first run and after the second: its updates reach every
# key (count, wall clock), or the stream-time suppressions release what the input closed
FIRST_EXPECTED = {"update": FIRST_COUNTS, "wall_clock": FIRST_COUNTS, "window_closes": FIRST_FINALS,
                  "time_limit": FIRST_FINALS, "emit_early": FIRST_FINALS}
FINAL_EXPECTED = {"update": ALL_COUNTS, "wall_clock": ALL_COUNTS, "window_closes": DATA_COUNTS,
                  "time_limit": DATA_COUNTS, "emit_early": DATA_COUNTS}


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SparkSession, kh.Broker]]:
    broker = kh.Broker(tmp_path_factory.mktemp("kafka")).start()
    stop_session()
    spark = realtime_kill_child.session()
    spark.conf.set(PROVIDER_KEY, ROCKSDB)
    yield spark, broker
    stop_session()
    broker.stop()


def _updates() -> list[tuple[str, int, int]]:
    """The count's rows with no cache: one per record, its (window, key)'s running count."""
    counts: dict[tuple[str, int], int] = {}
    out = []
    for i in RECORDS:
        e = _window_key(i)
        counts[e] = counts.get(e, 0) + 1
        out.append((*e, counts[e]))
    return out


def _time_limited(bound: int | None) -> tuple[list[tuple[str, int, int]], int]:
    """until_time_limit's rows on stream time, per record as Kafka Streams forwards them: an entry is
    buffered at its first record's event time (since it last left); after each record, entries whose
    buffer time is at or below stream time minus the limit leave, oldest first, then, while more than
    `bound` are buffered, the oldest leave early. Returns the rows and how many left early."""
    buffered: dict[tuple[str, int], tuple[int, int]] = {}  # (key, end) -> (buffer time, count)
    counts: dict[tuple[str, int], int] = {}
    out: list[tuple[str, int, int]] = []
    stream, early = 0, 0
    for i in RECORDS:
        e, t = _window_key(i), BASE + i
        counts[e] = counts.get(e, 0) + 1
        stream = max(stream, t)
        buffered[e] = (buffered.get(e, (t, 0))[0], counts[e])
        while buffered and (oldest := min(buffered, key=lambda x: buffered[x][0])) is not None and (
                buffered[oldest][0] <= stream - TIME_LIMIT_S or (bound is not None and len(buffered) > bound)):
            early += buffered[oldest][0] > stream - TIME_LIMIT_S
            out.append((*oldest, buffered.pop(oldest)[1]))
    return out, early


EXACT = {"update": _updates(), "time_limit": _time_limited(None)[0], "emit_early": _time_limited(BOUND)[0],
         "window_closes": None, "wall_clock": None}


def test_the_input_exercises_what_the_matrix_needs() -> None:
    assert _time_limited(BOUND)[1] > 0  # the bound pushes entries out early
    assert EXACT["emit_early"] != EXACT["time_limit"]
    assert all(n > 1 for n in DATA_COUNTS.values())  # every (window, key) updated more than once
    assert len(DATA_COUNTS) > len(FIRST_FINALS) > 0  # the first run closes some windows, the second the rest
    assert all(end + 2 <= BASE + FAR for _, end in DATA_COUNTS)  # the closing event passes end + grace


def _last_rows(rows: list[tuple[str, int, int]]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for k, end, n in rows:
        out[(k, end)] = n
    return out


def _meets(rows: list[tuple[str, int, int]], expected: dict[tuple[str, int], int]) -> bool:
    last = _last_rows(rows)
    return all(last.get(key) == n for key, n in expected.items())


def _run(spark: SparkSession, df: DataFrame, checkpoint: Path, out: Path, until: Callable[[list], bool],
         settle: bool = False, timeout: float = 60.0) -> list[tuple[str, int, int]]:
    """Runs `df` under the real-time trigger into `out` until its rows satisfy `until` (and, with
    `settle`, the batch that wrote the last of them has ended, so a row it would still emit, one too
    many, is in the output), then stops it."""
    q = start_to_files(df, str(checkpoint), str(out))
    try:
        deadline = time.monotonic() + timeout
        while not (until(rows := file_rows(out)) and (not settle or later_batch_opened(out))):
            assert q.isActive, q.exception()
            assert time.monotonic() < deadline, f"not the rows expected after {timeout} s: {rows}"
            time.sleep(0.1)
    finally:
        q.stop()
    return file_rows(out)


def _check_rows(query: str, rows: list[tuple[str, int, int]]) -> None:
    per_key: dict[tuple[str, int], list[int]] = {}
    for k, end, n in rows:
        per_key.setdefault((k, end), []).append(n)
    if query == "window_closes":
        assert len(rows) == len(set(rows)), "a final result emitted twice"
        assert {(k, end): n for k, end, n in rows} == DATA_COUNTS
        return
    assert all(ns == sorted(set(ns)) for ns in per_key.values()), f"a count repeated or went back: {per_key}"
    assert _last_rows(rows).items() >= FINAL_EXPECTED[query].items()
    assert set(per_key) <= set(ALL_COUNTS)
    if query in ("time_limit", "emit_early"):
        # the closing event's (window, key): its limit is past the input's stream time, its window open
        assert FAR_KEY not in per_key


def _check_exact(query: str, interval: str, rows: list[tuple[str, int, int]]) -> None:
    if interval == "interval_off" and EXACT[query] is not None:
        assert rows == EXACT[query]


@pytest.mark.parametrize("interval", list(INTERVALS))
@pytest.mark.parametrize("query", list(QUERIES))
def test_each_combination_gives_the_expected_results_across_a_restart(rt, tmp_path: Path, query: str,
                                                                      interval: str) -> None:
    spark, broker = rt
    topic = f"{query}_{interval}"
    kh.create_topic(spark, broker.bootstrap, topic, 1)
    produce_events(spark, broker.bootstrap, topic, 0, FIRST)
    out = tmp_path / "out"
    out.mkdir()
    with session_conf(spark, {INTERVAL_KEY: INTERVALS[interval]}):  # read when a query starts
        # stopped once the first batch has ended: a real-time batch writes its offset log entry when
        # it ends, a stop during that write leaves Spark's temporary file in offsets/, and with no
        # batch committed Spark refuses to restart on it (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY,
        # "offsets should be empty on batch 0"; seen here with the plain count too)
        first = _run(spark, QUERIES[query](spark, broker.bootstrap, topic), tmp_path / "ckpt", out,
                     lambda rows: _meets(rows, FIRST_EXPECTED[query]), settle=True)
        if query == "window_closes":
            assert {(k, end): n for k, end, n in first} == FIRST_FINALS and len(first) == len(set(first))
        produce_events(spark, broker.bootstrap, topic, FIRST, MORE)
        produce_events(spark, broker.bootstrap, topic, FAR, 1)
        rows = _run(spark, QUERIES[query](spark, broker.bootstrap, topic), tmp_path / "ckpt", out,
                    lambda rows: _meets(rows, FINAL_EXPECTED[query]), settle=True)
    _check_rows(query, rows)
    _check_exact(query, interval, rows)
