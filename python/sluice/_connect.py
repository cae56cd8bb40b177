"""Spark Connect client side of sluice.

A Connect client has no JVM: ``suppress`` sends its plan to the server as a relation ``extension``
that sluice's relation plugin (``sluice.connect.SuppressRelationPlugin``, registered on the server
with ``spark.connect.extensions.relation.classes``) turns into the plan the classic API builds.
This module encodes plain values (``sluice.suppress`` turns its objects into them), and imports
pyspark's Connect client (grpc, protobuf) only when a Connect object is actually in use, so
``import sluice`` works without the client's extras.
"""

from __future__ import annotations

from typing import Any

from sluice import _conf, _handles
from sluice._conf import CONNECT_RELATION_CLASSES_KEY
from sluice._errors import SluiceError, on_missing_connect_plugin, translating


def _missing_plugin() -> SluiceError:
    loading = _conf.loading_settings()
    return SluiceError(
        "the Spark Connect server does not load sluice's relation plugin, which suppress needs: "
        f"start it with --jars <sluice.jar_path()> and --conf {CONNECT_RELATION_CLASSES_KEY}="
        f"{loading[CONNECT_RELATION_CLASSES_KEY]} (and the other sluice keys: "
        + ", ".join(f"{k}={v}" for k, v in loading.items() if k != CONNECT_RELATION_CLASSES_KEY)
        + ")"
    )


on_missing_connect_plugin(_missing_plugin)


# --- the extension message (its schema is documented in sluice.connect.SuppressRelation) --------


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # an int64 is written as its 64-bit two's complement
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _bytes_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _string_field(number: int, value: str) -> bytes:
    return _bytes_field(number, value.encode("utf-8"))


def _int64_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def encode(
    input_relation: bytes,
    kind: str,
    limit_ms: int,
    when_full: str,
    max_records: int | None = None,
    max_bytes: int | None = None,
    name: str | None = None,
    time_col: str | None = None,
    grace_ms: int | None = None,
    late_path: str | None = None,
    late_format: str | None = None,
    late_options: dict[str, str] | None = None,
) -> bytes:
    """The ``sluice.connect.Suppress`` message for ``suppress`` of ``input_relation`` (a bound left
    out is unbounded; a grace left out is the watermark delay)."""
    out = _bytes_field(1, input_relation) + _string_field(2, kind)
    out += _int64_field(3, limit_ms)
    if max_records is not None:
        out += _int64_field(4, max_records)
    if max_bytes is not None:
        out += _int64_field(5, max_bytes)
    out += _string_field(6, when_full)
    if name is not None:
        out += _string_field(7, name)
    if time_col is not None:
        out += _string_field(8, time_col)
    if grace_ms is not None:
        out += _int64_field(9, grace_ms)
    if late_path is not None:
        out += _string_field(10, late_path)
    if late_format is not None:
        out += _string_field(11, late_format)
    for key, value in sorted((late_options or {}).items()):
        out += _bytes_field(12, _string_field(1, key) + _string_field(2, value))  # a map<string, string> entry
    return out


# --- the plan ---------------------------------------------------------------------------------


def _plan_class() -> type:
    LogicalPlan = _handles.connect_logical_plan_class()

    class SuppressRelation(LogicalPlan):  # type: ignore[misc, valid-type]
        """``suppress`` of ``child``: a relation ``extension`` for sluice's server plugin."""

        def __init__(self, child: Any, fields: dict[str, Any]) -> None:
            super().__init__(child)
            self._fields = fields

        def plan(self, session: Any) -> Any:
            assert self._child is not None
            rel = self._create_proto_relation()
            child = self._child.plan(session).SerializeToString()
            rel.extension.type_url = _conf.contract()["connect_type_url"]
            rel.extension.value = encode(child, **self._fields)
            return rel

    return SuppressRelation


_PLAN_CLASS: list[type] = []


@translating
def suppress(df: Any, fields: dict[str, Any]) -> Any:
    """``sluice.suppress`` for a Connect DataFrame, with ``encode``'s fields. The result is analyzed
    at once (one round trip), so misuse raises here with the classic API's error, not when the
    query starts."""
    if not _PLAN_CLASS:
        _PLAN_CLASS.append(_plan_class())
    out = _handles.connect_dataframe(_PLAN_CLASS[0](_handles.connect_plan(df), fields), df.sparkSession)
    out.schema  # noqa: B018 (analysis on the server)
    return out
