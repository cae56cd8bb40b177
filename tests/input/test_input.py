"""input.buffer.max.bytes (KIP-770) on the file and rate sources, and its validation. The Kafka
source is tested against a real broker in test_input_kafka.py."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Iterator

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import sluice
from sluice.input import BYTES_METRIC, MAX_BYTES_PER_TRIGGER, THROTTLED_METRIC
from support.session import BASE_CONF, fresh_builder, sluice_session, stop_session

KEY = "spark.sluice.input.buffer.max.bytes"


@pytest.fixture(scope="module")
def fspark() -> Iterator[SparkSession]:
    yield sluice_session()


@pytest.fixture
def bound(fspark: SparkSession) -> Iterator[None]:
    """Sets the query-wide bound in the session for one test (it is read when a query is built)."""
    yield None
    fspark.conf.unset(KEY)


def write_files(directory: Path, sizes: list[int], start: int = 0) -> dict[str, int]:
    """One text file per size, `size` bytes each (one line per file, unique id first), with
    increasing modification times so the file source takes them in order."""
    directory.mkdir(parents=True, exist_ok=True)
    out = {}
    now = time.time() - 1000
    for i, size in enumerate(sizes, start):
        path = directory / f"f{i:04d}.txt"
        line = f"{i:06d}".ljust(size - 1, "x") + "\n"
        path.write_text(line)
        os.utime(path, (now + i, now + i))
        out[path.name] = size
    return out


class FileRecorder:
    """foreachBatch sink: the ids and source files of every batch, by batch id."""

    def __init__(self) -> None:
        self.batches: dict[int, list[tuple[str, str]]] = {}

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        rows = df.select(F.substring("value", 1, 6).alias("id"),
                         F.element_at(F.split(F.input_file_name(), "/"), -1).alias("file")).collect()
        self.batches[batch_id] = [(r.id, r.file) for r in rows]

    def bytes(self, batch_id: int, sizes: dict[str, int]) -> int:
        return sum(sizes[f] for _, f in self.batches[batch_id])

    def ids(self) -> list[str]:
        return sorted(i for b in self.batches.values() for i, _ in b)


def text_stream(spark: SparkSession, directory: Path, **options: object) -> DataFrame:
    reader = spark.readStream.format("text")
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader.load(str(directory))


def run(df: DataFrame, sink: FileRecorder, checkpoint: Path) -> dict[int, dict[str, str]]:
    q = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint)).start()
    try:
        q.processAllAvailable()
        return {p["batchId"]: p["sources"][0]["metrics"] for p in q.recentProgress
                if p["numInputRows"] > 0}
    finally:
        q.stop()


def test_file_source_batches_stay_within_the_session_bound(
        fspark: SparkSession, bound: None, tmp_path: Path) -> None:
    sizes = write_files(tmp_path / "in", [1000 + (i * 737) % 3000 for i in range(30)] + [9000])
    fspark.conf.set(KEY, "6k")
    sink = FileRecorder()
    metrics = run(text_stream(fspark, tmp_path / "in"), sink, tmp_path / "cp")
    assert sink.ids() == [f"{i:06d}" for i in range(31)]  # every file once
    per_batch = {i: sink.bytes(i, sizes) for i in sink.batches}
    assert len(per_batch) >= sum(sizes.values()) // 6144
    for i, b in per_batch.items():
        files = {f for _, f in sink.batches[i]}
        # Within the bound, except a single file larger than the bound: it is admitted alone.
        assert b <= 6144 or (len(files) == 1 and b == 9000), (i, b, files)
        assert int(metrics[i][BYTES_METRIC]) == b
    assert any(m[THROTTLED_METRIC] == "1" for m in metrics.values())


def test_file_source_restart_mid_backlog_loses_and_repeats_nothing(
        fspark: SparkSession, tmp_path: Path) -> None:
    write_files(tmp_path / "in", [2000] * 20)
    sink = FileRecorder()
    df = text_stream(fspark, tmp_path / "in", **{MAX_BYTES_PER_TRIGGER: 4000})
    q = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "cp")).start()
    deadline = time.monotonic() + 60
    while len(sink.batches) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    q.stop()
    assert 3 <= len(sink.batches) < 10
    run(text_stream(fspark, tmp_path / "in", **{MAX_BYTES_PER_TRIGGER: 4000}), sink,
        tmp_path / "cp")
    assert sink.ids() == [f"{i:06d}" for i in range(20)]  # none lost, none twice
    assert all(len(b) <= 2 for b in sink.batches.values())


def test_file_source_composes_with_max_files_per_trigger_smaller_wins(
        fspark: SparkSession, tmp_path: Path) -> None:
    write_files(tmp_path / "in", [1000] * 12)
    # maxFilesPerTrigger is smaller: 2 files (2 KB) per batch under a 10 KB bound.
    sink = FileRecorder()
    run(text_stream(fspark, tmp_path / "in", maxFilesPerTrigger=2,
                    **{"sluice.maxBytesPerTrigger": "10k"}), sink, tmp_path / "a")
    counts = [len(sink.batches[i]) for i in sorted(sink.batches)]
    assert max(counts) == 2 and sum(counts) == 12, counts
    # The bound is smaller: 3 files (3000 bytes) fit 3500 bytes, though 10 files are allowed.
    sink = FileRecorder()
    run(text_stream(fspark, tmp_path / "in", maxFilesPerTrigger=10,
                    **{"sluice.maxBytesPerTrigger": 3500}), sink, tmp_path / "b")
    counts = [len(sink.batches[i]) for i in sorted(sink.batches)]
    assert max(counts) == 3 and sum(counts) == 12, counts
    # And with the source's own maxBytesPerTrigger, the smaller byte limit wins.
    sink = FileRecorder()
    run(text_stream(fspark, tmp_path / "in", maxBytesPerTrigger=2500,
                    **{"sluice.maxBytesPerTrigger": "10k"}), sink, tmp_path / "c")
    counts = [len(sink.batches[i]) for i in sorted(sink.batches)]
    assert counts == [2] * 6, counts


def test_session_bound_is_split_over_the_sources_that_share_it(
        fspark: SparkSession, bound: None, tmp_path: Path) -> None:
    """Two sources share the query-wide bound (half each); a third with its own source option is
    bounded by that option alone."""
    for name in ("a", "b", "c"):
        write_files(tmp_path / name, [1000] * 6, start={"a": 0, "b": 100, "c": 200}[name])
    fspark.conf.set(KEY, "4000")
    df = (text_stream(fspark, tmp_path / "a").union(text_stream(fspark, tmp_path / "b"))
          .union(text_stream(fspark, tmp_path / "c", **{MAX_BYTES_PER_TRIGGER: 1000})))
    sink = FileRecorder()
    q = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "cp")).start()
    try:
        q.processAllAvailable()
        reported = {p["batchId"]: {next(n for n in "abc" if src["description"].rstrip("]").endswith(f"/{n}")):
                                   int(src["metrics"][BYTES_METRIC]) for src in p["sources"]}
                    for p in q.recentProgress if p["numInputRows"] > 0}
    finally:
        q.stop()
    assert sink.ids() == sorted(f"{i:06d}" for s in (0, 100, 200) for i in range(s, s + 6))
    source = {"0": "a", "1": "b", "2": "c"}  # files f00NN, f01NN, f02NN
    admitted: dict[str, list[int]] = {"a": [], "b": [], "c": []}
    for i in sorted(sink.batches):
        for name in admitted:
            got = sum(1000 for _, f in sink.batches[i] if source[f[2]] == name)
            assert reported[i][name] == got, (i, name, reported[i])  # 0 when it read nothing
            if got:
                admitted[name].append(got)
    assert admitted == {"a": [2000] * 3, "b": [2000] * 3, "c": [1000] * 6}


def test_trigger_available_now_drains_in_bounded_batches(fspark: SparkSession, tmp_path: Path) -> None:
    write_files(tmp_path / "in", [1500] * 10)
    sink = FileRecorder()
    q = (text_stream(fspark, tmp_path / "in", **{MAX_BYTES_PER_TRIGGER: 3000}).writeStream
         .foreachBatch(sink).trigger(availableNow=True)
         .option("checkpointLocation", str(tmp_path / "cp")).start())
    q.awaitTermination(120)
    assert sink.ids() == [f"{i:06d}" for i in range(10)]
    assert [len(sink.batches[i]) for i in sorted(sink.batches)] == [2] * 5


def test_rate_source_backlog_after_downtime_is_admitted_within_the_bound(
        fspark: SparkSession, tmp_path: Path) -> None:
    rows_per_second = 1000
    bound = 2 * rows_per_second * 24  # two seconds of rows (24 bytes each)

    def rate() -> DataFrame:
        return (fspark.readStream.format("rate").option("rowsPerSecond", rows_per_second)
                .option("sluice.maxBytesPerTrigger", bound).load())

    batches: dict[int, tuple[int, int, int]] = {}

    def sink(df: DataFrame, batch_id: int) -> None:
        r = df.agg(F.count("*").alias("n"), F.min("value").alias("lo"), F.max("value").alias("hi")).first()
        batches[batch_id] = (r.n, r.lo, r.hi)

    q = rate().writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "cp")).start()
    deadline = time.monotonic() + 60
    while not any(n for n, _, _ in batches.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    q.stop()
    seen = len(batches)
    time.sleep(6)  # downtime: the rate source's backlog grows with wall-clock time
    q = rate().writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "cp")).start()
    deadline = time.monotonic() + 60
    while len(batches) < seen + 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    progress = [p for p in q.recentProgress if p["numInputRows"] > 0]
    q.stop()
    after = [batches[i] for i in sorted(batches) if i >= seen]
    assert all(n <= 2 * rows_per_second for n, _, _ in after), after
    assert progress and all(int(p["sources"][0]["metrics"]["inputBufferBytesTotal"])
                            == 24 * p["numInputRows"] <= bound for p in progress)
    assert any(p["sources"][0]["metrics"]["inputBufferThrottledPartitions"] == "1" for p in progress)
    # Values are consecutive across batches and the restart: nothing skipped or repeated.
    ranges = sorted((lo, hi, n) for n, lo, hi in batches.values() if n)
    assert all(a[1] + 1 == b[0] for a, b in zip(ranges, ranges[1:])), ranges
    assert all(hi - lo + 1 == n for lo, hi, n in ranges)


@pytest.mark.parametrize("value", ["0", "-1"])
def test_zero_or_negative_bound_is_rejected_at_startup(value: str) -> None:
    stop_session()
    builder = fresh_builder().master("local[2]").appName("sluice-input-conf")
    for k, v in {**BASE_CONF, KEY: value}.items():
        builder = builder.config(k, v)
    with pytest.raises(sluice.SluiceConfError) as info:
        sluice.configure(builder).getOrCreate()
    assert KEY in str(info.value) and f"'{value}'" in str(info.value) and "at least 1" in str(info.value)
    assert SparkSession.getActiveSession() is None
    with pytest.raises(ValueError, match=KEY):
        sluice.configure(fresh_builder(), input_buffer_max_bytes=value)


def test_bad_source_option_fails_when_the_dataframe_is_built(tmp_path: Path) -> None:
    spark = sluice_session()
    (tmp_path / "in").mkdir()
    for value in ["0", "-5", "lots"]:
        with pytest.raises(Exception) as info:
            text_stream(spark, tmp_path / "in", **{"sluice.maxBytesPerTrigger": value})
        message = str(info.value)
        assert f"Invalid value '{value}' for source option sluice.maxBytesPerTrigger" in message
        assert "at least 1" in message
