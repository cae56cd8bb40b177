"""A test driver for streaming pipelines, as Kafka Streams' ``TopologyTestDriver``.

``PipelineDriver`` runs a user's pipeline (a function from an input streaming DataFrame to the
output DataFrame) as a real streaming query on the test's local SparkSession: rows are piped in
batch by batch from the test, the wall clock moves only when the test advances it, and every
micro-batch's output rows and state operator metrics are kept. Suppress (every mode, buffered and
fused), the record cache, the emission cache and the window store run exactly as in production;
what differs is where the rows come from (an in-memory source), where they go (a sink that keeps
each batch) and the clock (the test's).

Example::

    from datetime import datetime, timedelta
    from pyspark.sql import functions as F
    from sluice import BufferConfig, Suppressed, suppress
    from sluice.testing import PipelineDriver

    def pipeline(events):
        counts = (events.withWatermark("ts", "0 seconds")
                  .groupBy(F.window("ts", "1 minute"), "key").count())
        return suppress(counts, Suppressed.until_window_closes(BufferConfig.unbounded()))

    with PipelineDriver(spark, pipeline, schema="ts timestamp, key string") as driver:
        driver.pipe_input([(datetime(2024, 1, 1, 0, 0, 10), "a")])
        driver.advance_wall_clock(timedelta(seconds=1))     # one micro-batch: nothing final yet
        driver.pipe_input([(datetime(2024, 1, 1, 0, 1, 30), "b")])
        driver.advance_wall_clock(timedelta(seconds=1))     # moves the watermark past 00:01
        rows = driver.advance_wall_clock(timedelta(seconds=1))  # the batch that closes the window
        assert [(r.key, r["count"]) for r in rows] == [("a", 1)]
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.types import StructType

from sluice import _handles
from sluice._errors import translating

__all__ = ["PipelineDriver", "Batch"]

Pipeline = Callable[[DataFrame], DataFrame]
WallClock = datetime | int
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _ms(d: timedelta | int) -> int:
    """A duration as whole milliseconds: a timedelta, or an int of milliseconds."""
    if isinstance(d, bool):
        raise TypeError("a duration is a timedelta or an int of milliseconds")
    if isinstance(d, timedelta):
        return int(d / timedelta(milliseconds=1))
    if isinstance(d, int):
        return d
    raise TypeError(f"a duration is a timedelta or an int of milliseconds, got {type(d).__name__}")


def _clock_ms(t: WallClock) -> int:
    if isinstance(t, datetime):
        aware = t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)
        return _ms(aware - _EPOCH)
    return _ms(t)


@dataclass
class Batch:
    """One delivery of a micro-batch to the driver's sink.

    Attributes:
        batch_id: The micro-batch's id (Spark's batch id, counted over the whole checkpoint).
        wall_clock: The batch's timestamp: the wall-clock time Spark planned it at (UTC), which
            ``until_wall_clock_time_limit`` and the emission cache judge time by.
        rows: The rows the pipeline output in this batch.
        replay: True when this batch id was delivered before (Spark replayed a batch that had not
            committed, after ``fail_next_batch`` and ``restart``).
        failed: True when the delivery failed as ``fail_next_batch`` asked: its rows were computed,
            the batch never committed, and Spark delivers it again after ``restart``.
        progress: The query's progress report of the batch (``StreamingQueryProgress`` as a dict),
            or None if the batch did not complete.
    """

    batch_id: int
    wall_clock: datetime
    rows: list[Row]
    replay: bool = False
    failed: bool = False
    progress: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def operators(self) -> list[dict[str, Any]]:
        """The batch's ``stateOperators`` progress entries, in the plan's order (sluice's own are
        ``suppress``, ``emitCache`` and ``sluiceSessionUpdate``; Spark's aggregation is
        ``stateStoreSave``)."""
        return list((self.progress or {}).get("stateOperators", []))

    def metric(self, name: str, operator: str | None = None) -> int:
        """A state operator metric of this batch, summed over the operators named ``operator``
        (all if None): a custom metric (``suppressionEmitTotal``, ``emitCacheBytes``,
        ``cacheHits``, ``windowStoreRecords``, ...) or a standard one (``numRowsTotal``,
        ``numRowsUpdated``, ...). 0 where an operator does not report it."""
        total = 0
        for op in self.operators:
            if operator is not None and op.get("operatorName") != operator:
                continue
            value = op.get("customMetrics", {}).get(name, op.get(name, 0))
            total += int(value) if isinstance(value, (int, float)) else 0
        return total


class PipelineDriver:
    """Runs ``pipeline`` as a streaming query fed and clocked by the test.

    The query reads an in-memory source of rows of ``schema`` and writes to a sink that keeps every
    micro-batch; its checkpoint is ``checkpoint`` (a temporary directory if None, removed by
    ``close``). It runs on ``spark``, the test's session: configure it with ``sluice.configure``
    (providers, the record cache, the commit interval are its settings, read when the query starts).

    The wall clock is the query's trigger clock, the one Spark stamps each micro-batch with. It
    stands still until ``advance_wall_clock`` moves it; each advance runs the one trigger due at the
    new time, as Spark would: a micro-batch of all the input piped since the last batch, else a
    batch without input if an operator has something due (a window the watermark closed, a
    wall-clock limit or commit interval passed), else nothing. Event time is in the rows.

    Args:
        spark: The test's SparkSession (classic, not Spark Connect).
        pipeline: Builds the output DataFrame from the input streaming DataFrame; called again at
            every (re)start, on a new input DataFrame.
        schema: The input rows' schema: a ``StructType`` or a DDL string
            (``"ts timestamp, key string"``).
        output_mode: ``"update"`` (suppress needs it), ``"append"`` or ``"complete"``.
        checkpoint: The query's checkpoint directory.
        start: The wall clock's time when the driver starts: a datetime (naive means UTC) or
            milliseconds since the epoch.
        timeout: Seconds to wait for a trigger to finish before failing.

    Raises:
        pyspark.errors.StreamingQueryException: From ``advance_wall_clock`` or ``restart`` when the
            query fails (sluice's own errors are raised as their ``sluice`` exceptions).
    """

    def __init__(
        self,
        spark: SparkSession,
        pipeline: Pipeline,
        schema: StructType | str,
        output_mode: str = "update",
        checkpoint: str | Path | None = None,
        *,
        start: WallClock = 0,
        timeout: float = 120.0,
    ) -> None:
        self._spark = spark
        self._pipeline = pipeline
        self._schema = schema if isinstance(schema, StructType) else spark.createDataFrame([], schema).schema
        self._own_checkpoint = checkpoint is None
        self._checkpoint = Path(tempfile.mkdtemp(prefix="sluice-driver-")) if checkpoint is None else Path(checkpoint)
        self._batches: list[Batch] = []
        self._read = 0
        self._progress: dict[int, dict[str, Any]] = {}
        jvm = _handles.jvm(spark)
        jschema = jvm.org.apache.spark.sql.types.DataType.fromJson(self._schema.json())
        with translating():
            self._jdriver = jvm.sluice.testing.PipelineDriver.create(
                _handles.jsession(spark),
                jschema,
                output_mode,
                str(self._checkpoint.resolve()),
                _clock_ms(start),
                int(timeout * 1000),
            )
        self._start()

    # -- input ---------------------------------------------------------------------------------

    def pipe_input(self, rows: Iterable[Any]) -> None:
        """Pipes ``rows`` in (tuples, lists, dicts or Rows of the input schema).

        Nothing runs yet: the next micro-batch (at the next ``advance_wall_clock``) reads these rows
        together with any others piped since the last batch, as a source's new records are read by
        the next trigger.
        """
        df = self._spark.createDataFrame(list(rows), self._schema)
        with translating():
            self._jdriver.pipeInput(_handles.jdf(df))

    # -- time ----------------------------------------------------------------------------------

    @property
    def wall_clock(self) -> datetime:
        """The wall clock's current time (UTC)."""
        return _EPOCH + timedelta(milliseconds=self.wall_clock_ms)

    @property
    def wall_clock_ms(self) -> int:
        """The wall clock's current time, in milliseconds since the epoch."""
        return int(self._jdriver.wallClockMs())

    def advance_wall_clock(self, by: timedelta | int = timedelta(milliseconds=1)) -> list[Row]:
        """Moves the wall clock forward ``by`` (a timedelta or milliseconds, at least 1 ms) and runs
        the trigger due then; returns the output rows of the micro-batch it ran (none if it ran no
        batch: no input piped and nothing due).

        One advance runs at most one micro-batch. A window closed by the watermark a batch moved is
        emitted by the next batch (a batch without input, at the next advance), as in Spark.

        If ``fail_next_batch`` was called, the batch fails after its rows were computed: its rows
        are recorded and returned, the query stops, and ``restart`` resumes it.
        """
        ms = _ms(by)
        if ms < 1:
            raise ValueError(f"advance the wall clock by at least 1 ms, not {by!r}")
        with translating():
            self._jdriver.advanceWallClock(ms)
        return [r for b in self._record() for r in b.rows]

    # -- restarts and failures -----------------------------------------------------------------

    def restart(self) -> list[Row]:
        """Stops the query cleanly and starts ``pipeline`` again on the same checkpoint, with the
        wall clock where it was; returns the output rows of any batch the restart ran at once (a
        batch replayed after ``fail_next_batch``, or one of input piped while stopped)."""
        self._progress_of_run()
        with translating():
            self._jdriver.stop()
        return [r for b in self._start() for r in b.rows]

    def fail_next_batch(self) -> None:
        """Makes the next micro-batch fail after its output was computed and its state committed,
        before Spark commits the batch: as a process killed at that moment. The query stops; on
        ``restart`` Spark replays the batch (its ``Batch.replay`` is True)."""
        self._jdriver.failNextBatch()

    # -- output --------------------------------------------------------------------------------

    @property
    def batches(self) -> list[Batch]:
        """Every micro-batch delivered so far, in order, replays included."""
        self._progress_of_run()
        return list(self._batches)

    @property
    def last_batch(self) -> Batch | None:
        """The last micro-batch delivered, or None."""
        batches = self.batches
        return batches[-1] if batches else None

    def read_output(self) -> list[Row]:
        """The output rows delivered since the last ``read_output`` (as reading an output topic),
        as an exactly-once sink keeps them: failed deliveries left out, each batch once."""
        fresh = self._kept()[self._read :]
        self._read += len(fresh)
        return [r for b in fresh for r in b.rows]

    def output(self) -> list[Row]:
        """Every output row so far, as ``read_output`` gives them, in batch order."""
        return [r for b in self._kept() for r in b.rows]

    def _kept(self) -> list[Batch]:
        kept: list[Batch] = []
        done: set[int] = set()
        for b in self._batches:
            if not b.failed and b.batch_id not in done:
                kept.append(b)
                done.add(b.batch_id)
        return kept

    def metric(self, name: str, operator: str | None = None) -> int:
        """``Batch.metric`` of the last batch that reported progress (0 if none did)."""
        for b in reversed(self.batches):
            if b.progress is not None:
                return b.metric(name, operator)
        return 0

    @property
    def query(self) -> Any:
        """The running ``pyspark.sql.streaming.StreamingQuery``."""
        from pyspark.sql.streaming.query import StreamingQuery

        return StreamingQuery(self._jdriver.query())

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Stops the query; removes the checkpoint if the driver made it."""
        try:
            self._progress_of_run()
            self._jdriver.close()
        finally:
            if self._own_checkpoint:
                shutil.rmtree(self._checkpoint, ignore_errors=True)

    def __enter__(self) -> PipelineDriver:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------

    def _start(self) -> list[Batch]:
        output = self._pipeline(_handles.dataframe(self._jdriver.input(), self._spark))
        if not isinstance(output, DataFrame):
            raise TypeError(f"the pipeline must return a DataFrame, got {type(output).__name__}")
        with translating():
            self._jdriver.start(_handles.jdf(output))
        return self._record()

    def _record(self) -> list[Batch]:
        """Records the sink's deliveries not recorded yet, and the progress reported so far."""
        seen = {b.batch_id for b in self._batches}
        out = []
        for d in list(self._jdriver.deliveriesList())[len(self._batches) :]:
            rows = _handles.dataframe(self._jdriver.rowsOf(d), self._spark).collect()
            batch_id = int(d.batchId())
            out.append(
                Batch(
                    batch_id,
                    _EPOCH + timedelta(milliseconds=int(d.timestampMs())),
                    rows,
                    replay=batch_id in seen,
                    failed=bool(d.failed()),
                )
            )
            seen.add(batch_id)
        self._batches.extend(out)
        self._progress_of_run()
        return out

    def _progress_of_run(self) -> None:
        """Fills in each completed batch's progress from the running query's recent progress."""
        try:
            jquery = self._jdriver.query()
        except Exception:  # not running (stopped, or failed as asked)
            return
        for p in jquery.recentProgress():
            report = json.loads(p.json())
            if "addBatch" in report.get("durationMs", {}):
                self._progress[int(report["batchId"])] = report
        for b in self._batches:
            if b.progress is None and not b.failed and b.batch_id in self._progress:
                b.progress = self._progress[b.batch_id]
