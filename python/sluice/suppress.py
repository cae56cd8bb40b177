"""suppress (KIP-328, KIP-539): final results and per-key rate limits on a streaming aggregation.

``suppress(df, suppressed)`` holds back the updates of an update-mode aggregation and emits, per
grouping key, the latest row when ``suppressed`` says so. The buffer lives in a Spark state store
under the query checkpoint; the query must run in update output mode.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, cast

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from sluice import _conf, _connect, _handles
from sluice._errors import SluiceSuppressError, translating

__all__ = [
    "suppress",
    "Suppressed",
    "BufferConfig",
    "StrictBufferConfig",
    "EagerBufferConfig",
    "SluiceSuppressError",
    "late_records",
]

_UNBOUNDED = (1 << 63) - 1
Duration = timedelta | int | float


def _bound(name: str, n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"{name} must be an int, got {type(n).__name__}")
    if n < 0:
        raise ValueError(f"{name} must be >= 0, got {n}")
    return n


def _millis(d: Duration, what: str = "time limit") -> int:
    """A duration as milliseconds: a timedelta or a number of seconds."""
    if isinstance(d, bool):
        raise TypeError(f"{what} must be a timedelta or a number of seconds")
    if isinstance(d, timedelta):
        ms = d / timedelta(milliseconds=1)
    elif isinstance(d, (int, float)):
        ms = d * 1000
    else:
        raise TypeError(f"{what} must be a timedelta or a number of seconds, got {type(d).__name__}")
    if ms < 0:
        raise ValueError(f"{what} must not be negative, got {d!r}")
    return int(ms)


@dataclass(frozen=True)
class BufferConfig:
    """The bound of a suppress buffer per partition of the operator and what to do when it is
    exceeded. Use the constructors ``max_records``, ``max_bytes`` and ``unbounded``.

    As in Kafka Streams, the type tells whether a config may emit early: ``max_records`` /
    ``max_bytes`` give an :class:`EagerBufferConfig` (emit the oldest rows early when full);
    ``unbounded()``, ``shut_down_when_full()`` and ``spill_to_disk_when_full()`` give a
    :class:`StrictBufferConfig`, the only kind ``Suppressed.until_window_closes`` accepts.
    """

    records: int = _UNBOUNDED
    bytes: int = _UNBOUNDED
    when_full: str = "emit_early"

    @staticmethod
    def max_records(n: int) -> EagerBufferConfig:
        return EagerBufferConfig(records=_bound("max_records", n))

    @staticmethod
    def max_bytes(n: int) -> EagerBufferConfig:
        return EagerBufferConfig(bytes=_bound("max_bytes", n))

    @staticmethod
    def unbounded() -> StrictBufferConfig:
        return StrictBufferConfig(when_full="shut_down")

    def with_max_records(self, n: int) -> BufferConfig:
        return replace(self, records=_bound("max_records", n))

    def with_max_bytes(self, n: int) -> BufferConfig:
        return replace(self, bytes=_bound("max_bytes", n))

    def with_no_bound(self) -> StrictBufferConfig:
        return StrictBufferConfig(when_full="shut_down")

    def emit_early_when_full(self) -> EagerBufferConfig:
        return EagerBufferConfig(records=self.records, bytes=self.bytes)

    def shut_down_when_full(self) -> StrictBufferConfig:
        return StrictBufferConfig(records=self.records, bytes=self.bytes, when_full="shut_down")

    def spill_to_disk_when_full(self) -> StrictBufferConfig:
        return StrictBufferConfig(records=self.records, bytes=self.bytes, when_full="spill_to_disk")

    def _to_java(self, spark: Any) -> Any:
        cfg = (
            _handles.jvm(spark)
            .sluice.suppress.BufferConfig.unbounded()
            .withMaxRecords(self.records)
            .withMaxBytes(self.bytes)
        )
        if self.when_full == "emit_early":
            return cfg.emitEarlyWhenFull()
        if self.when_full == "spill_to_disk":
            return cfg.spillToDiskWhenFull()
        return cfg.shutDownWhenFull()


@dataclass(frozen=True)
class EagerBufferConfig(BufferConfig):
    """A buffer config that emits the oldest rows early when full."""

    def with_max_records(self, n: int) -> EagerBufferConfig:
        return replace(self, records=_bound("max_records", n))

    def with_max_bytes(self, n: int) -> EagerBufferConfig:
        return replace(self, bytes=_bound("max_bytes", n))


@dataclass(frozen=True)
class StrictBufferConfig(BufferConfig):
    """A buffer config that never emits early: it shuts the query down or spills to disk."""

    when_full: str = "shut_down"

    def with_max_records(self, n: int) -> StrictBufferConfig:
        return replace(self, records=_bound("max_records", n))

    def with_max_bytes(self, n: int) -> StrictBufferConfig:
        return replace(self, bytes=_bound("max_bytes", n))


@dataclass(frozen=True)
class Suppressed:
    """When ``suppress`` lets a buffered row through. Use the three constructors."""

    kind: str
    buffer: BufferConfig
    limit_ms: int = 0
    name: str | None = None
    grace_ms: int | None = None
    late_path: str | None = None
    late_format: str = "parquet"
    late_options: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def until_window_closes(buffer_config: StrictBufferConfig, grace: Duration | None = None) -> Suppressed:
        """One final row per window and key, once the window closes. Accepts only a strict config.

        Without ``grace`` a window closes when the watermark passes its end (the watermark delay is
        the grace period). With ``grace`` (a timedelta or seconds; KIP-328's grace period, as Kafka
        Streams' ``TimeWindows.ofSizeAndGrace``) it closes once stream time, the largest event time
        the query has seen (before the batch), passes its end plus the grace; rows for a closed
        window are late: dropped and counted (``lateRecordDropTotal``). The grace must not exceed
        the watermark delay; a larger one fails when ``suppress`` builds the DataFrame."""
        if not isinstance(buffer_config, StrictBufferConfig):
            raise TypeError(
                "until_window_closes needs a strict buffer config (BufferConfig.unbounded(), or a bound with "
                ".shut_down_when_full() or .spill_to_disk_when_full()): emitting early would break the "
                f"one-final-result guarantee; got {buffer_config}"
            )
        grace_ms = None if grace is None else _millis(grace, "grace period")
        return Suppressed("until_window_closes", buffer_config, grace_ms=grace_ms)

    @staticmethod
    def until_time_limit(time_to_wait_for_more_events: Duration, buffer_config: BufferConfig) -> Suppressed:
        """Emit a key's latest row once stream time (the largest ``time_col`` seen) is the limit past
        the time the key was first buffered. A timedelta or seconds; 0 forwards at once."""
        return Suppressed("until_time_limit", _check_config(buffer_config), _millis(time_to_wait_for_more_events))

    @staticmethod
    def until_wall_clock_time_limit(time_to_wait: Duration, buffer_config: BufferConfig) -> Suppressed:
        """Emit a key's latest row once the wall clock is the limit past the time the key was first
        buffered, in the first micro-batch at or after that time (KIP-539), also without input."""
        return Suppressed("until_wall_clock_time_limit", _check_config(buffer_config), _millis(time_to_wait))

    def with_late_records(
        self, path: str, format: str = "parquet", options: dict[str, str] | None = None
    ) -> Suppressed:
        """Keeps the records dropped as late instead of only counting them (``until_window_closes``).

        Every input record of the aggregation whose window had already closed when it came (by the
        grace period, or by Spark's watermark) is written to ``path`` in Spark file format ``format``
        (``parquet``, ``json``, ``orc`` or ``csv``; ``options`` as ``df.write.options`` takes them):
        each micro-batch's under ``path/batch_id=<id>/``, exactly once across restarts and replays.
        A record carries the aggregation's input columns (window, keys, event time, values) and
        ``late_by_ms``, how far stream time was past the window's close when it came. Read them
        with ``spark.read.format(format).load(path)``, or as a stream with :func:`late_records`.
        Time windows (``F.window``) and session windows (``F.session_window``, judged with a grace
        by the session a record merges into); micro-batch and real-time triggers."""
        if self.kind != "until_window_closes":
            raise ValueError(
                "late records are kept by until_window_closes, whose windows close; "
                f"{self.kind} drops no record as late"
            )
        opts = _late_location(path, format, options)
        return replace(self, late_path=path, late_format=format, late_options=tuple(sorted(opts.items())))

    def with_name(self, name: str) -> Suppressed:
        """Names the operator in errors (e.g. the buffer-full error)."""
        if not isinstance(name, str) or not name:
            raise ValueError("name must be a non-empty string")
        return replace(self, name=name)

    def _to_java(self, spark: Any) -> Any:
        s = _handles.jvm(spark).sluice.suppress.Suppressed
        buf = self.buffer._to_java(spark)
        if self.kind == "until_window_closes":
            j = s.untilWindowCloses(buf) if self.grace_ms is None else s.untilWindowCloses(buf, self.grace_ms)
            if self.late_path is not None:
                j = j.withLateRecords(self.late_path, self.late_format, dict(self.late_options))
        elif self.kind == "until_time_limit":
            j = s.untilTimeLimit(self.limit_ms, buf)
        else:
            j = s.untilWallClockTimeLimit(self.limit_ms, buf)
        return j.withName(self.name) if self.name else j

    def _wire(self) -> dict[str, Any]:
        """This config as the plain values the Connect encoding takes (``sluice._connect.encode``)."""
        buf = self.buffer
        return {
            "kind": self.kind,
            "limit_ms": self.limit_ms,
            "when_full": buf.when_full,
            "max_records": None if buf.records == _UNBOUNDED else buf.records,
            "max_bytes": None if buf.bytes == _UNBOUNDED else buf.bytes,
            "name": self.name,
            "grace_ms": self.grace_ms,
            "late_path": self.late_path,
            "late_format": self.late_format if self.late_path is not None else None,
            "late_options": dict(self.late_options) if self.late_path is not None else None,
        }


def _check_config(cfg: Any) -> BufferConfig:
    if not isinstance(cfg, BufferConfig):
        raise TypeError(f"buffer_config must be a BufferConfig, got {type(cfg).__name__}")
    return cfg


def suppress(df: DataFrame, suppressed: Suppressed, *, time_col: str | None = None) -> DataFrame:
    """Suppresses the updates of the streaming aggregation ``df`` as ``suppressed`` says.

    Returns a streaming DataFrame with the columns of ``df``; write it with
    ``outputMode("update")``. ``time_col`` (``until_time_limit`` only) names the timestamp column
    giving a row's event time, e.g. ``"ts"`` or ``"window.end"``. Misuse raises
    :class:`SluiceSuppressError` (a ``ValueError``) here, not when the query runs.

    ``df`` may be a Spark Connect DataFrame: the server then needs sluice's relation plugin
    (``sluice.configure`` sets it; see the Spark Connect and SQL page of the documentation).
    """
    if not isinstance(df, DataFrame):
        raise TypeError(f"suppress needs a pyspark DataFrame, got {type(df).__name__}")
    if not isinstance(suppressed, Suppressed):
        raise TypeError(f"suppressed must be a Suppressed, got {type(suppressed).__name__}")
    if time_col is not None and not isinstance(time_col, str):
        raise TypeError(f"time_col must be a column name, got {type(time_col).__name__}")
    if _handles.is_connect_dataframe(df):
        return cast(DataFrame, _connect.suppress(df, {**suppressed._wire(), "time_col": time_col}))
    spark = df.sparkSession
    with translating():
        jsup = suppressed._to_java(spark)
        entry = _handles.jvm(spark).sluice.suppress.Suppress
        jdf = _handles.jdf(df)
        out = entry.apply(jdf, jsup) if time_col is None else entry.apply(jdf, jsup, time_col)
    return cast(DataFrame, _handles.dataframe(out, spark))


def _late_location(path: object, format: object, options: object) -> dict[str, str]:
    """Where late records are kept, checked as `with_late_records` and `late_records` both take it: the
    options, a dict of strings."""
    if not isinstance(path, str) or not path:
        raise ValueError("late records need a path (a non-empty string)")
    if not isinstance(format, str) or not format:
        raise ValueError("late records need a format (a non-empty string such as 'parquet')")
    opts = {} if options is None else options
    if not isinstance(opts, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in opts.items()):
        raise TypeError("options must be a dict of strings to strings")
    return opts


def late_records(
    spark: SparkSession,
    path: str,
    checkpoint: str,
    format: str = "parquet",
    options: dict[str, str] | None = None,
    schema: StructType | str | None = None,
) -> DataFrame:
    """The late records kept at ``path`` (``Suppressed.with_late_records``) as a streaming DataFrame.

    ``checkpoint`` is the checkpoint location of the query that keeps them; ``format`` and
    ``options`` are the ones it writes them with. Each micro-batch of the stream has the records of
    the batches that query committed since the stream's last micro-batch, with their columns and
    ``batch_id`` (a long: the query's batch that kept them). A batch is offered only once that
    query has committed it, so no record is read that a rerun of its batch could rewrite. Write the
    stream with ``writeStream.foreachBatch(fn)`` or ``writeStream.format("delta")`` under its own
    checkpoint location, and each record is delivered once across restarts of either query.

    The columns come from a file the keeping query writes beside the records before its first
    batch; until that query has run a batch, give them as ``schema``. Raises
    :class:`SluiceSuppressError` when ``checkpoint`` is no streaming checkpoint location, when the
    records at ``path`` are written in another format or by another query, or when ``schema`` is
    not theirs.
    """
    opts = _late_location(path, format, options)
    if not isinstance(checkpoint, str) or not checkpoint:
        raise ValueError("the late records stream needs the checkpoint location of the query that keeps them")
    names = _conf.contract()["late_records"]
    reader = (
        spark.readStream.format(names["source"])
        .options(**opts)
        .option(names["checkpoint_option"], checkpoint)
        .option(names["format_option"], format)
    )
    if schema is not None:
        reader = reader.schema(schema)
    with translating():
        return reader.load(path)
