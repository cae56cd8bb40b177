"""The kept late records as a stream: ``sluice.late_records(spark, path, checkpoint)`` offers the records
a query keeps (``with_late_records``) batch by batch, each batch once the query has committed it, so a
second query writing the stream with ``foreachBatch`` under its own checkpoint gets each record once,
across restarts of either query. Misuse (a checkpoint that is not a streaming one, another format,
another query's checkpoint, a schema file of a newer format version) fails when the stream is built.

The keeping query is driven by ``sluice.testing.PipelineDriver``; the late stream runs with
``availableNow`` triggers. Event times are seconds after T0; windows are one minute, the watermark
delay ten minutes, the grace 30 seconds.
"""
from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sluice import BufferConfig, SluiceSuppressError, Suppressed, _conf, late_records, suppress
from sluice.testing import PipelineDriver

pytestmark = pytest.mark.every_minor

T0 = datetime(2024, 1, 1)
SCHEMA = "ts timestamp, user string"
KEPT_SCHEMA = "window struct<start: timestamp, end: timestamp>, user string, ts timestamp, late_by_ms long"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def final_results(late: Path, fmt: str = "parquet") -> Any:
    suppressed = Suppressed.until_window_closes(BufferConfig.unbounded(), grace=timedelta(seconds=30))
    suppressed = suppressed.with_late_records(str(late), fmt)

    def pipeline(events: DataFrame) -> DataFrame:
        counts = events.withWatermark("ts", "10 minutes").groupBy(F.window("ts", "1 minute"), "user").count()
        return suppress(counts, suppressed)

    return pipeline


def feed(driver: PipelineDriver, *events: tuple[float, str]) -> None:
    """One micro-batch of `events`, then the batch without input that emits what it closed."""
    driver.pipe_input([(at(s), u) for s, u in events])
    driver.advance_wall_clock(timedelta(seconds=1))
    driver.advance_wall_clock(timedelta(seconds=1))


def record(r: Any) -> tuple:
    return (r.batch_id, r.window.start, r.user, r.ts, r.late_by_ms)


class Drain:
    """The late stream written with foreachBatch under its own checkpoint, run to what is available
    (``availableNow``) at each call: every delivered micro-batch is kept as (its batch id, records)."""

    def __init__(self, spark: SparkSession, late: Path, checkpoint: Path, own: Path, **kw: Any) -> None:
        self.spark, self.late, self.checkpoint, self.own, self.kw = spark, late, checkpoint, own, kw
        self.delivered: list[tuple[int, list[tuple]]] = []

    def __call__(self) -> list[tuple]:
        """Runs the stream once; returns the records it delivered this time."""
        before = len(self.delivered)

        def sink(batch: DataFrame, batch_id: int) -> None:
            self.delivered.append((batch_id, sorted(record(r) for r in batch.collect())))

        q = (late_records(self.spark, str(self.late), str(self.checkpoint), **self.kw).writeStream
             .foreachBatch(sink).option("checkpointLocation", str(self.own)).trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert q.exception() is None
        return sorted(r for _, rows in self.delivered[before:] for r in rows)

    def records(self) -> list[tuple]:
        return sorted(r for _, rows in self.delivered for r in rows)


def kept(spark: SparkSession, late: Path) -> list[tuple]:
    """What the keeping query wrote, read as a batch."""
    return sorted(record(r) for r in spark.read.parquet(str(late)).collect())


def late_metric_by_batch(driver: PipelineDriver) -> dict[int, int]:
    name = "numRowsDroppedByWatermark"
    return {b.batch_id: b.metric(name) for b in driver.batches if b.progress is not None and b.metric(name)}


def test_each_kept_record_is_delivered_once_across_restarts(spark: SparkSession, tmp_path: Path,
                                                            provider: str) -> None:
    """The stream delivers exactly the records the query kept, with the query's batch ids and as many
    per batch as its late-drop metric; a restart of the stream's query redelivers nothing; a batch
    whose late records are written but which failed before its commit is not offered until its replay
    commits it, and then once."""
    late, ckpt = tmp_path / "late", tmp_path / "ckpt"
    drain = Drain(spark, late, ckpt, tmp_path / "late-ckpt")
    with PipelineDriver(spark, final_results(late), SCHEMA, checkpoint=ckpt) as driver:
        feed(driver, (10, "a"), (20, "b"), (40, "a"))
        feed(driver, (95, "a"))  # stream time 95: [0, 60) closes
        feed(driver, (50, "a"), (55, "c"))  # late by 5 s
        first = drain()
        assert [r[1:] for r in first] == [(at(0), "a", at(50), 5000), (at(0), "c", at(55), 5000)]
        assert first == kept(spark, late)
        assert drain() == []  # nothing new: a restart of the stream redelivers nothing

        feed(driver, (151, "c"))  # [60, 120) closes
        driver.fail_next_batch()  # late records written, the batch not committed
        driver.pipe_input([(at(70), "d"), (at(80), "e")])
        driver.advance_wall_clock(timedelta(seconds=1))
        failed = driver.batches[-1]
        assert failed.failed
        written = late / f"batch_id={failed.batch_id}"
        assert any(p.name.startswith("part-") for p in written.iterdir())
        assert drain() == []  # written but not committed: not offered

        driver.restart()  # replays the failed batch, which commits it
        feed(driver, (800, "f"))
        metric = late_metric_by_batch(driver)
    second = drain()
    assert [r[1:] for r in second] == [(at(60), "d", at(70), 1000), (at(60), "e", at(80), 1000)]
    assert {r[0] for r in second} == {failed.batch_id}
    assert drain() == []
    everything = drain.records()
    assert everything == kept(spark, late)
    assert len(set(everything)) == len(everything)
    assert dict(Counter(r[0] for r in everything)) == metric


def test_a_batch_directory_without_a_commit_is_not_read(spark: SparkSession, tmp_path: Path) -> None:
    """Files under the directory of a batch the query has not committed (here copied there by hand)
    stay unread, however far the stream has read."""
    late, ckpt = tmp_path / "late", tmp_path / "ckpt"
    drain = Drain(spark, late, ckpt, tmp_path / "late-ckpt")
    with PipelineDriver(spark, final_results(late), SCHEMA, checkpoint=ckpt) as driver:
        feed(driver, (10, "a"), (95, "a"))
        feed(driver, (50, "a"))
        last = driver.batches[-1].batch_id
    written = [d for d in late.iterdir() if d.name.startswith("batch_id=")]
    assert len(written) == 1
    ahead = late / f"batch_id={last + 5}"
    ahead.mkdir()
    for f in written[0].iterdir():
        if f.name.startswith("part-"):
            (ahead / f.name).write_bytes(f.read_bytes())
    got = drain()
    assert [r[1:] for r in got] == [(at(0), "a", at(50), 5000)]
    assert {r[0] for r in got} == {int(written[0].name.split("=")[1])}
    assert len(kept(spark, late)) == 2  # the copy is there for a batch reader


def test_the_stream_starts_before_any_record_with_the_schema_given(spark: SparkSession, tmp_path: Path) -> None:
    """Before the query has run a batch there is no schema file: the stream refuses to guess the
    columns and says how to give them; given them, it starts and delivers the records once they come."""
    late, ckpt = tmp_path / "late", tmp_path / "ckpt"
    with PipelineDriver(spark, final_results(late), SCHEMA, checkpoint=ckpt) as driver:
        with pytest.raises(SluiceSuppressError, match="no late records' schema at .*start that query and let it "
                                                       "run a batch, or give the records' schema"):
            late_records(spark, str(late), str(ckpt))
        drain = Drain(spark, late, ckpt, tmp_path / "late-ckpt", schema=KEPT_SCHEMA)
        assert drain() == []
        feed(driver, (10, "a"), (95, "a"))
        feed(driver, (50, "a"))
    assert [r[1:] for r in drain()] == [(at(0), "a", at(50), 5000)]
    stored = json.loads((late / _conf.contract()["late_records"]["schema_file"]).read_text())
    assert stored["version"] == 1 and stored["format"] == "parquet"
    with pytest.raises(SluiceSuppressError, match="the schema given for the late records .* is not theirs"):
        late_records(spark, str(late), str(ckpt), schema="user string, late_by_ms long")


@pytest.fixture(scope="module")
def keeping(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A query that kept late records in parquet: (their path, its checkpoint)."""
    root = tmp_path_factory.mktemp("keeping")
    late, ckpt = root / "late", root / "ckpt"
    with PipelineDriver(spark, final_results(late), SCHEMA, checkpoint=ckpt) as driver:
        feed(driver, (10, "a"), (95, "a"))
        feed(driver, (50, "a"))
    return late, ckpt


def test_a_checkpoint_that_is_no_streaming_checkpoint_is_refused(spark: SparkSession, tmp_path: Path,
                                                                 keeping: tuple[Path, Path]) -> None:
    late, _ = keeping
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    with pytest.raises(SluiceSuppressError, match=r"is not a streaming query's checkpoint location: expected its "
                                                  r"metadata and offsets, found \[notes.txt\]"):
        late_records(spark, str(late), str(tmp_path))
    with pytest.raises(SluiceSuppressError, match="found no such directory"):
        late_records(spark, str(late), str(tmp_path / "missing"))


def test_another_querys_checkpoint_is_refused(spark: SparkSession, tmp_path: Path,
                                              keeping: tuple[Path, Path]) -> None:
    late, ckpt = keeping
    with PipelineDriver(spark, final_results(tmp_path / "other-late"), SCHEMA, checkpoint=tmp_path / "other"):
        pass
    with pytest.raises(SluiceSuppressError, match=f"kept by the query of checkpoint .*{ckpt.name}, not of "):
        late_records(spark, str(late), str(tmp_path / "other"))


def test_another_format_is_refused(spark: SparkSession, keeping: tuple[Path, Path]) -> None:
    late, ckpt = keeping
    with pytest.raises(SluiceSuppressError, match=f"the late records at {late} are written as 'parquet', not 'json'"):
        late_records(spark, str(late), str(ckpt), format="json")
    with pytest.raises(SluiceSuppressError, match="'rate' .* is not a Spark file format"):
        late_records(spark, str(late), str(ckpt), format="rate")


def test_a_schema_file_of_a_newer_format_version_is_refused(spark: SparkSession, tmp_path: Path,
                                                            keeping: tuple[Path, Path]) -> None:
    late, ckpt = keeping
    name = _conf.contract()["late_records"]["schema_file"]
    copy = tmp_path / "late"
    copy.mkdir()
    stored = json.loads((late / name).read_text())
    (copy / name).write_text(json.dumps({**stored, "version": 7}))
    with pytest.raises(SluiceSuppressError, match="it has format version 7, written by a newer sluice; this sluice "
                                                  "reads format versions up to 1"):
        late_records(spark, str(copy), str(ckpt))
