"""suppress for SQL users: the `sluice_suppress` table-valued function over a streaming
aggregation view, on a real streaming query; its arguments build the same operator as the Python
API, and misuse is an AnalysisException naming what to do."""
from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from sluice import BufferConfig, Suppressed, suppress

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
COUNTS = ("SELECT window(ts, '10 seconds') AS window, user, count(*) AS n FROM events "
          "GROUP BY window(ts, '10 seconds'), user")
LATEST = "SELECT user, max(ts) AS ts, count(*) AS n FROM events GROUP BY user"


def _write(src: Path, n: int, events: list[tuple[int, str]]) -> None:
    tmp = src / f".{n}.tmp"
    tmp.write_text("".join(json.dumps({"ts": (T0 + timedelta(seconds=s)).isoformat(), "user": u}) + "\n"
                           for s, u in events))
    tmp.rename(src / f"{n:03d}.json")


@pytest.fixture()
def views(spark: SparkSession, tmp_path: Path):
    """`events` (a streaming file source, 10 s watermark) and `counts`, its per-10-second-window
    count per user, both made in SQL but for the watermark."""
    src = tmp_path / "in"
    src.mkdir()
    events = (spark.readStream.schema("ts timestamp, user string").option("maxFilesPerTrigger", 1)
              .json(str(src)).withWatermark("ts", "10 seconds"))
    events.createOrReplaceTempView("events")
    spark.sql(f"CREATE OR REPLACE TEMP VIEW counts AS {COUNTS}")
    spark.sql(f"CREATE OR REPLACE TEMP VIEW latest AS {LATEST}")
    yield src
    spark.catalog.dropTempView("counts")
    spark.catalog.dropTempView("latest")
    spark.catalog.dropTempView("events")


def test_until_window_closes_in_sql_emits_each_final_count_once(spark: SparkSession, views: Path,
                                                                tmp_path: Path) -> None:
    batches: list[list[tuple]] = []
    final = spark.sql("SELECT window.start AS start, user, n "
                      "FROM sluice_suppress(TABLE(counts), 'until_window_closes')")
    assert final.isStreaming
    query = (final.writeStream.outputMode("update")
             .foreachBatch(lambda df, _: batches.append([(r.start.second, r.user, r.n) for r in df.collect()]))
             .option("checkpointLocation", str(tmp_path / "ckpt")).start())
    try:
        first = [(1, "a"), (2, "a"), (5, "b"), (12, "a")]
        second = [(14, "b"), (31, "a")]  # moves the watermark to 21 s: [0, 10) and [10, 20) close
        _write(views, 0, first)
        query.processAllAvailable()
        assert [r for b in batches for r in b] == []  # updates held back, nothing closed yet
        _write(views, 1, second)
        query.processAllAvailable()
    finally:
        query.stop()
    emitted = [r for b in batches for r in b]
    closed = Counter((s // 10 * 10, u) for s, u in first + second if s // 10 * 10 + 10 <= 31 - 10)
    assert sorted(emitted) == sorted((start, u, n) for (start, u), n in closed.items())
    assert sorted(emitted) == [(0, "a", 2), (0, "b", 1), (10, "a", 1), (10, "b", 1)]


def _suppress_node(df) -> str:
    plan = df._jdf.queryExecution().analyzed().toString()
    node = next(line for line in plan.splitlines() if "SuppressNode" in line)
    return re.sub(r"#\d+", "", node.strip(" +-:"))


@pytest.mark.parametrize("args,suppressed,time_col", [
    ("'until_window_closes'", Suppressed.until_window_closes(BufferConfig.unbounded()), None),
    ("'until_window_closes', 'max_records=5, spill_to_disk_when_full'",
     Suppressed.until_window_closes(BufferConfig.max_records(5).spill_to_disk_when_full()), None),
    ("'until_time_limit', INTERVAL 30 SECONDS, 'ts', 'max_records=100 max_bytes=1m'",
     Suppressed.until_time_limit(timedelta(seconds=30), BufferConfig.max_records(100).with_max_bytes(1 << 20)), "ts"),
    ("'until_wall_clock_time_limit', '1 minute', 'max_bytes=64k shut_down_when_full'",
     Suppressed.until_wall_clock_time_limit(timedelta(minutes=1),
                                            BufferConfig.max_bytes(64 << 10).shut_down_when_full()), None),
])
def test_sql_arguments_build_the_python_api_operator(spark: SparkSession, views: Path, args: str,
                                                     suppressed: Suppressed, time_col: str | None) -> None:
    table, query = ("counts", COUNTS) if "window" in args else ("latest", LATEST)
    in_sql = spark.sql(f"SELECT * FROM sluice_suppress(TABLE({table}), {args})")
    in_python = suppress(spark.sql(query), suppressed, time_col=time_col)
    assert _suppress_node(in_sql) == _suppress_node(in_python)


@pytest.mark.parametrize("call,message", [
    ("sluice_suppress(TABLE(counts), 'until_window_closes', 'max_records=5')", "may not emit early"),
    ("sluice_suppress(TABLE(counts), 'until_time_limit', INTERVAL 30 SECONDS)", "takes 4 to 5"),
    ("sluice_suppress(TABLE(counts), 'until_later')", "unknown mode 'until_later'"),
    ("sluice_suppress(TABLE(counts), 'until_wall_clock_time_limit', '1 month')", "must not use months"),
    ("sluice_suppress(TABLE(counts), 'until_wall_clock_time_limit', INTERVAL 1 MONTH)", "got INTERVAL MONTH"),
    ("sluice_suppress('counts', 'until_window_closes')", "first argument must be TABLE"),
    ("sluice_suppress(TABLE(SELECT 1 AS x), 'until_window_closes')", "needs a streaming DataFrame"),
    ("sluice_suppress(TABLE(events), 'until_window_closes')", "needs the result of a streaming aggregation"),
])
def test_sql_misuse_is_an_analysis_error_saying_what_to_do(spark: SparkSession, views: Path, call: str,
                                                           message: str) -> None:
    with pytest.raises(AnalysisException, match=re.escape(message)):
        spark.sql(f"SELECT * FROM {call}")
