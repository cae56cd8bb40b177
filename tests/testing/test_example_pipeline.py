"""An example to copy: unit tests of a streaming pipeline with sluice.testing.PipelineDriver.

The pipeline counts each user's clicks per minute and emits one final count per user and minute,
once the minute has closed (suppress's until_window_closes), with 10 seconds of grace for late
clicks. The tests pipe clicks in batch by batch and drive the wall clock; no Kafka, no files, no
sleeps. (docs/features/testing.md explains what the driver does.)
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import sluice
from sluice import BufferConfig, Suppressed, suppress
from sluice.testing import PipelineDriver

CLICKS = "ts timestamp, user string"
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)


def minute_counts(clicks: DataFrame) -> DataFrame:
    """The pipeline under test: a function of the input streaming DataFrame."""
    per_minute = (clicks.withWatermark("ts", "10 seconds")
                  .groupBy(F.window("ts", "1 minute"), "user").count())
    return suppress(per_minute, Suppressed.until_window_closes(BufferConfig.unbounded()))


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    # The test's own local session, configured by sluice (a running one is reused).
    builder = (SparkSession.builder.master("local[2]")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC"))
    return sluice.configure(builder).getOrCreate()


def click(seconds: float, user: str) -> tuple[datetime, str]:
    return (T0 + timedelta(seconds=seconds), user)


def counts(rows: list) -> dict[tuple[int, str], int]:
    """{(minute after T0, user): count} of output rows."""
    return {(int((r.window.start.timestamp() - T0.timestamp()) // 60), r.user): r["count"] for r in rows}


def test_a_minute_is_emitted_once_when_the_watermark_passes_its_end(spark: SparkSession, tmp_path) -> None:
    with PipelineDriver(spark, minute_counts, CLICKS, output_mode="update", checkpoint=tmp_path) as driver:
        driver.pipe_input([click(5, "ann"), click(20, "bob"), click(50, "ann")])
        assert driver.advance_wall_clock(timedelta(seconds=1)) == []   # one micro-batch, nothing final
        driver.pipe_input([click(65, "bob")])                          # watermark 55 s: minute 0 still open
        assert driver.advance_wall_clock(timedelta(seconds=1)) == []
        driver.pipe_input([click(75, "bob")])                          # moves the watermark to 65 s ...
        assert driver.advance_wall_clock(timedelta(seconds=1)) == []
        closed = driver.advance_wall_clock(timedelta(seconds=1))       # ... and the next batch closes minute 0
        assert counts(closed) == {(0, "ann"): 2, (0, "bob"): 1}
        assert driver.last_batch.batch_id == 3


def test_a_click_later_than_the_grace_period_is_dropped(spark: SparkSession, tmp_path) -> None:
    with PipelineDriver(spark, minute_counts, CLICKS, checkpoint=tmp_path) as driver:
        driver.pipe_input([click(5, "ann"), click(130, "bob")])        # watermark -> 120 s
        driver.advance_wall_clock(timedelta(seconds=1))
        driver.advance_wall_clock(timedelta(seconds=1))                # closes minute 0
        driver.pipe_input([click(30, "ann")])                          # minute 0 is closed: too late
        driver.advance_wall_clock(timedelta(seconds=1))
        driver.pipe_input([click(200, "bob")])
        driver.advance_wall_clock(timedelta(seconds=1))
        driver.advance_wall_clock(timedelta(seconds=1))                # closes minute 2
        assert counts(driver.output()) == {(0, "ann"): 1, (2, "bob"): 1}


def test_a_restart_emits_each_minute_once(spark: SparkSession, tmp_path) -> None:
    with PipelineDriver(spark, minute_counts, CLICKS, checkpoint=tmp_path) as driver:
        driver.pipe_input([click(5, "ann")])
        driver.advance_wall_clock(timedelta(seconds=1))
        driver.restart()                                               # stopped and resumed on the checkpoint
        driver.pipe_input([click(90, "ann")])
        driver.advance_wall_clock(timedelta(seconds=1))
        driver.advance_wall_clock(timedelta(seconds=1))                # closes minute 0
        driver.fail_next_batch()                                       # the process dies in the next batch
        driver.pipe_input([click(200, "ann")])
        driver.advance_wall_clock(timedelta(seconds=1))
        driver.restart()                                               # Spark replays that batch
        driver.advance_wall_clock(timedelta(seconds=1))                # closes minute 1
        assert counts(driver.output()) == {(0, "ann"): 1, (1, "ann"): 1}
        assert len(driver.output()) == 2
