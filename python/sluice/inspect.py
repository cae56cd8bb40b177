"""Reading a query's sluice state from its checkpoint, in readable form.

``inspect(spark, checkpoint_location)`` answers "why hasn't my window been emitted yet?": per
suppress operator the rows it buffers, their buffer time and when each becomes due; per emission
cache the rows it holds and when they are forwarded; per in-memory window store its segments,
stream time and retention. It works in any SparkSession configured with sluice, also a fresh one
after the query's own session has stopped, and reads the last committed batch.

The mode and limit of each suppress operator and the emission cache's interval are not part of
Spark's checkpoint: sluice records them beside the operator's state
(``<checkpoint>/state/<operator id>/_sluice_operator.json``) when a query run plans the operator.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from sluice import _handles
from sluice._errors import translating

__all__ = ["inspect", "SluiceState", "SuppressState", "EmitCacheState", "WindowStoreState"]

_DUE_RULES = {
    "until_window_closes": "due once the watermark (with a grace of its own: stream time - grace) reaches "
    "due_at (the window end); "
    "due_next_batch: the next batch's watermark already does",
    "until_time_limit": "due once the partition's stream time (largest time_col seen) reaches due_at "
    "(buffer time + limit); stream time moves only with input",
    "until_wall_clock_time_limit": "due once the wall clock reaches due_at (buffer time + limit); "
    "due_next_batch: it has (a no-data batch would emit it)",
}


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _ts(ms: int | None) -> datetime | None:
    return None if ms is None else _at(ms)


def _text(df: DataFrame, n: int) -> str:
    return _handles.show_string(df, n)


@dataclass
class SuppressState:
    """One suppress operator. ``rows``: one row per buffered key: ``key`` (the grouping key), the
    buffered row's columns, ``buffer_time``, ``due_at``, ``due_next_batch``, ``spilled`` (in the
    spill-to-disk store) and ``partition``. ``stream_time``: per partition, for until_time_limit."""

    operator_id: int
    name: str | None
    mode: str | None
    limit_ms: int | None
    buffer: dict[str, Any]
    rows: DataFrame
    stream_time: dict[int, datetime] = field(default_factory=dict)

    @property
    def due_rule(self) -> str:
        return _DUE_RULES.get(self.mode or "", "unknown mode: no sidecar was recorded for this operator")

    def describe(self, n: int = 20) -> str:
        limit = "" if self.limit_ms is None else f", limit {self.limit_ms} ms"
        b = self.buffer
        bound = (
            "unknown"
            if not b
            else (
                f"max_records={b['max_records'] or 'unbounded'}, max_bytes={b['max_bytes'] or 'unbounded'}, "
                f"when_full={b['when_full']}"
            )
        )
        head = (
            f"suppress operator {self.operator_id}"
            + (f" ({self.name})" if self.name else "")
            + f": {self.mode or 'mode unknown'}{limit}, buffer {bound}"
        )
        lines = [head, f"  {self.due_rule}"]
        if self.stream_time:
            lines.append(
                "  stream time: "
                + ", ".join(f"partition {p}: {t.isoformat()}" for p, t in sorted(self.stream_time.items()))
            )
        lines.append(_text(self.rows.drop("key"), n))
        return "\n".join(lines)


@dataclass
class EmitCacheState:
    """One emission cache. ``rows``: the held rows' columns, ``insert_time`` (when the key entered
    the cache), ``due_at`` (its partition's oldest insert time + the interval: a partition forwards
    all its rows together then, or earlier when its share of the cache is exceeded) and
    ``partition``."""

    operator_id: int
    interval_ms: int | None
    rows: DataFrame

    def describe(self, n: int = 20) -> str:
        interval = "unknown" if self.interval_ms is None else f"{self.interval_ms} ms"
        return (
            f"emission cache {self.operator_id}: interval {interval}; a partition forwards all it holds once "
            f"its oldest row has waited the interval (due_at)\n{_text(self.rows, n)}"
        )


@dataclass
class WindowStoreState:
    """One operator's in-memory window store. ``segments``: per partition and window start, the
    number of rows, the partition's ``stream_time`` (largest window start seen) and
    ``expires_at`` (the stream time at which the segment is dropped: window start + retention;
    null without retention)."""

    operator_id: int
    operator_name: str
    retention_ms: int
    segments: DataFrame

    def describe(self, n: int = 20) -> str:
        retention = (
            f"{self.retention_ms} ms"
            if self.retention_ms
            else "none (Spark's watermark evicts; stream time is tracked only with a retention)"
        )
        return (
            f"window store of operator {self.operator_id} ({self.operator_name}): retention {retention}\n"
            f"{_text(self.segments, n)}"
        )


@dataclass
class SluiceState:
    """A checkpoint's sluice state at its last committed batch."""

    checkpoint: str
    batch_id: int | None
    batch_time: datetime | None
    #: The last committed batch's watermark and the one the next batch runs with (the commit log's);
    #: None while the query has none (Spark's 0).
    watermark: datetime | None
    next_watermark: datetime | None
    state_store_provider: str | None
    suppress: list[SuppressState]
    emit_caches: list[EmitCacheState]
    window_stores: list[WindowStoreState]

    def describe(self, n: int = 20) -> str:
        def iso(t: datetime | None) -> str:
            return "-" if t is None else t.isoformat()

        lines = [
            f"checkpoint {self.checkpoint}",
            f"last committed batch {self.batch_id} at {iso(self.batch_time)}; watermark {iso(self.watermark)}, "
            f"next batch's watermark {iso(self.next_watermark)}",
            f"state store provider {self.state_store_provider or '-'}",
        ]
        parts = (
            [s.describe(n) for s in self.suppress]
            + [c.describe(n) for c in self.emit_caches]
            + [w.describe(n) for w in self.window_stores]
        )
        return "\n\n".join(["\n".join(lines)] + (parts or ["no sluice state"]))

    def __str__(self) -> str:
        return self.describe()

    def show(self, n: int = 20) -> None:
        print(self.describe(n))


@translating
def inspect(spark: SparkSession, checkpoint_location: str, *, now: datetime | None = None) -> SluiceState:
    """Reads the sluice state of the query whose checkpoint is ``checkpoint_location``.

    ``spark`` is any session configured with sluice (the query need not run). ``now`` is the
    wall-clock time that until_wall_clock_time_limit rows are judged against (default: now).
    """
    inspector = _handles.jvm(spark).sluice.inspect.StateInspector
    jspark = _handles.jsession(spark)
    inspector.prepare(jspark)  # Spark's statestore reader needs the coordinator a fresh session lacks
    summary = json.loads(str(inspector.summary(jspark, checkpoint_location)))
    # Which operators are whose and how their rows lie, as the JVM features publish it.
    layouts = json.loads(str(inspector.layouts()))
    batch = summary.get("lastCommittedBatchId")
    state = SluiceState(
        checkpoint=summary["checkpoint"],
        batch_id=batch,
        batch_time=_ts(summary.get("batchTimestampMs")),
        watermark=_ts(summary.get("batchWatermarkMs") or None),
        next_watermark=_ts(summary.get("nextBatchWatermarkMs") or None),
        state_store_provider=summary.get("providerClass"),
        suppress=[],
        emit_caches=[],
        window_stores=[],
    )
    if batch is None:
        return state
    version = batch + 1  # a batch commits the state version after its id
    sidecars = {int(k): v for k, v in summary.get("sidecars", {}).items()}
    operators = (
        spark.read.format("state-metadata")
        .load(checkpoint_location)
        .filter(F.col("stateStoreName") == "default")
        .select("operatorId", "operatorName", "numPartitions")
        .orderBy("operatorId")
        .collect()
    )
    now_ms = int((now or datetime.now(timezone.utc)).timestamp() * 1000)
    suppress_layout, emit_layout = layouts["suppress"], layouts["emitCache"]

    def owns(layout: dict[str, Any], op_id: int, name: str) -> bool:
        return op_id in range(*layout["operatorIds"]) and name == layout["operatorName"]

    for op in operators:
        op_id, name, partitions = int(op.operatorId), str(op.operatorName), int(op.numPartitions)
        sidecar = sidecars.get(op_id, {})
        if owns(suppress_layout, op_id, name):
            state.suppress.append(
                _suppress(
                    spark,
                    inspector,
                    checkpoint_location,
                    op_id,
                    partitions,
                    version,
                    sidecar,
                    summary,
                    now_ms,
                    suppress_layout,
                )
            )
        elif owns(emit_layout, op_id, name):
            state.emit_caches.append(
                _emit_cache(spark, inspector, checkpoint_location, op_id, partitions, version, sidecar, emit_layout)
            )
        elif (
            op_id in range(*layouts["sparkOperatorIds"])
            and summary.get("providerClass") == layouts["windowStore"]["providerClass"]
        ):
            settings = next(
                (
                    s["stateStore"]["windowStore"]
                    for s in sidecars.values()
                    if (s.get("stateStore") or {}).get("windowStore")
                ),
                None,
            )
            state.window_stores.append(
                _window_store(spark, inspector, checkpoint_location, op_id, name, partitions, version, settings)
            )
    return state


def _suppress(
    spark: SparkSession,
    inspector: Any,
    ckpt: str,
    op_id: int,
    partitions: int,
    version: int,
    sidecar: dict[str, Any],
    summary: dict[str, Any],
    now_ms: int,
    layout: dict[str, Any],
) -> SuppressState:
    mode, limit = sidecar.get("mode"), sidecar.get("limitMs")
    raw = spark.read.format("statestore").option("operatorId", op_id).load(ckpt).withColumn("spilled", F.lit(False))
    buffer = sidecar.get("buffer") or {}
    if buffer.get("whenFull") == layout["spillWhenFull"]:
        jspark = _handles.jsession(spark)
        schema = inspector.storeSchema(jspark, ckpt, op_id)
        spill = _handles.dataframe(inspector.readSpillStore(jspark, ckpt, op_id, partitions, version, schema), spark)
        raw = raw.unionByName(spill.withColumn("spilled", F.lit(True)))
    key = F.col("key").getField(layout["keyColumn"])
    buffer_ms = F.col("value").getField(layout["bufferTimeColumn"])
    meta = raw.filter(key.isNull())  # the partition's stream time, as its buffer time
    stream_time = {
        int(r.partition_id): _at(int(r.t)) for r in meta.select("partition_id", buffer_ms.alias("t")).collect()
    }
    rows = raw.filter(key.isNotNull())
    due_ms: Column = buffer_ms if mode == "until_window_closes" or limit is None else buffer_ms + F.lit(limit)
    if mode == "until_window_closes":
        next_wm = summary.get("nextBatchWatermarkMs")
        # With a grace below the watermark delay, windows close at stream time - grace = watermark +
        # (delay - grace), once the watermark tells stream time (> 0): SuppressExec.closeTime.
        early = sidecar.get("earlyMs") or 0
        if next_wm is not None and early > 0 and next_wm > 0:
            next_wm += early
        due_next: Column = due_ms <= F.lit(next_wm) if next_wm is not None else F.lit(False)
    elif mode == "until_time_limit":
        times = (
            F.create_map(*[x for p, t in stream_time.items() for x in (F.lit(p), F.lit(_ms(t)))])
            if stream_time
            else F.create_map().cast("map<int,bigint>")
        )
        due_next = F.coalesce(times[F.col("partition_id")] >= due_ms, F.lit(False))
    elif mode == "until_wall_clock_time_limit":
        due_next = due_ms <= F.lit(now_ms)
    else:
        due_next = F.lit(None).cast("boolean")
    out = rows.select(
        key.alias("key"),
        f"value.{layout['rowColumn']}.*",
        F.timestamp_millis(buffer_ms).alias("buffer_time"),
        F.timestamp_millis(due_ms).alias("due_at") if mode else F.lit(None).cast("timestamp").alias("due_at"),
        due_next.alias("due_next_batch"),
        "spilled",
        F.col("partition_id").alias("partition"),
    )
    bound = (
        {
            "max_records": buffer.get("maxRecords"),
            "max_bytes": buffer.get("maxBytes"),
            "when_full": buffer.get("whenFull"),
        }
        if buffer
        else {}
    )
    return SuppressState(
        op_id, sidecar.get("name"), mode, limit, bound, out.orderBy("due_at", "partition"), stream_time
    )


def _ms(t: datetime) -> int:
    return round(t.timestamp() * 1000)


def _emit_cache(
    spark: SparkSession,
    inspector: Any,
    ckpt: str,
    op_id: int,
    partitions: int,
    version: int,
    sidecar: dict[str, Any],
    layout: dict[str, Any],
) -> EmitCacheState:
    jspark = _handles.jsession(spark)
    schema = inspector.storeSchema(jspark, ckpt, op_id)
    raw = _handles.dataframe(inspector.readEmitCacheStore(jspark, ckpt, op_id, partitions, version, schema), spark)
    interval = sidecar.get("intervalMs")
    cols = [c for c in raw.schema["value"].dataType.fieldNames() if c not in layout["addedColumns"]]
    insert = F.col("value").getField(layout["insertTimeColumn"])
    oldest = F.min(insert).over(Window.partitionBy("partition_id"))
    due = F.timestamp_millis(oldest + F.lit(interval)) if interval is not None else F.lit(None).cast("timestamp")
    out = raw.select(
        *[F.col("value").getField(c).alias(c) for c in cols],
        F.timestamp_millis(insert).alias("insert_time"),
        due.alias("due_at"),
        F.col("partition_id").alias("partition"),
    )
    return EmitCacheState(op_id, interval, out.orderBy("due_at", "partition", "insert_time"))


def _window_store(
    spark: SparkSession,
    inspector: Any,
    ckpt: str,
    op_id: int,
    name: str,
    partitions: int,
    version: int,
    settings: dict[str, Any] | None,
) -> WindowStoreState:
    if settings is None:  # no sluice operator recorded the query's settings: this session's
        conf = _handles.jvm(spark).sluice.windowstore.WindowStoreSettings.apply(
            _handles.jsession(spark).conf().getAll()
        )
        settings = {"name": conf.name(), "retentionMs": conf.retentionMs()}
    jspark = _handles.jsession(spark)
    schema = inspector.storeSchema(jspark, ckpt, op_id)
    seg = _handles.dataframe(
        inspector.windowStoreSegments(
            jspark, ckpt, op_id, partitions, version, schema, settings["name"], settings["retentionMs"]
        ),
        spark,
    )
    retention = int(settings["retentionMs"])
    expires = (
        F.timestamp_millis(F.unix_millis("window_start") + F.lit(retention))
        if retention > 0
        else F.lit(None).cast("timestamp")
    )
    out = seg.select(
        F.col("partition_id").alias("partition"), "window_start", "rows", "stream_time", expires.alias("expires_at")
    ).orderBy("partition", "window_start")
    return WindowStoreState(op_id, name, retention, out)
