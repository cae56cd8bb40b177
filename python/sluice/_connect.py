"""Spark Connect client side of sluice.

A Connect client has no JVM: ``suppress`` sends its plan to the server as a relation ``extension``
that sluice's relation plugin (``sluice.connect.SuppressRelationPlugin``, registered on the server
with ``spark.connect.extensions.relation.classes``) turns into the plan the classic API builds.

This module imports pyspark's Connect client (grpc, protobuf) only when a Connect object is
actually in use, so ``import sluice`` works without the client's extras.
"""
from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING, Any, Optional

from sluice._conf import CONNECT_RELATION_PLUGIN, LOADING_SETTINGS, CONNECT_RELATION_CLASSES_KEY
from sluice._jvm import SluiceError

if TYPE_CHECKING:  # pragma: no cover
    from sluice.suppress import Suppressed

# Must match sluice.connect.SuppressRelation.TypeUrl on the server.
TYPE_URL = "type.googleapis.com/sluice.connect.Suppress"


def is_connect_dataframe(df: Any) -> bool:
    """Whether ``df`` is a Spark Connect DataFrame (checked without importing the Connect client:
    if it is not loaded, no Connect DataFrame exists)."""
    module = sys.modules.get("pyspark.sql.connect.dataframe")
    return module is not None and isinstance(df, module.DataFrame)


def is_connect_session(spark: Any) -> bool:
    module = sys.modules.get("pyspark.sql.connect.session")
    return module is not None and isinstance(spark, module.SparkSession)


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


def encode(input_relation: bytes, suppressed: "Suppressed", time_col: Optional[str]) -> bytes:
    """The ``sluice.connect.Suppress`` message for ``suppress(input, suppressed, time_col=...)``."""
    from sluice.suppress import _UNBOUNDED

    buf = suppressed.buffer
    out = _bytes_field(1, input_relation) + _string_field(2, suppressed.kind)
    out += _int64_field(3, suppressed.limit_ms)
    if buf.records != _UNBOUNDED:
        out += _int64_field(4, buf.records)
    if buf.bytes != _UNBOUNDED:
        out += _int64_field(5, buf.bytes)
    out += _string_field(6, buf.when_full)
    if suppressed.name is not None:
        out += _string_field(7, suppressed.name)
    if time_col is not None:
        out += _string_field(8, time_col)
    return out


# --- the plan ---------------------------------------------------------------------------------

def _plan_class() -> type:
    from pyspark.sql.connect.plan import LogicalPlan

    class SuppressRelation(LogicalPlan):
        """``suppress`` of ``child``: a relation ``extension`` for sluice's server plugin."""

        def __init__(self, child: LogicalPlan, suppressed: "Suppressed", time_col: Optional[str]) -> None:
            super().__init__(child)
            self._suppressed = suppressed
            self._time_col = time_col

        def plan(self, session: Any) -> Any:
            assert self._child is not None
            rel = self._create_proto_relation()
            child = self._child.plan(session).SerializeToString()
            rel.extension.type_url = TYPE_URL
            rel.extension.value = encode(child, self._suppressed, self._time_col)
            return rel

    return SuppressRelation


_PLAN_CLASS: list[type] = []


def suppress(df: Any, suppressed: "Suppressed", time_col: Optional[str]) -> Any:
    """``sluice.suppress`` for a Connect DataFrame. The result is analyzed at once (one round trip),
    so misuse raises here with the classic API's error, not when the query starts."""
    from pyspark.sql.connect.dataframe import DataFrame

    if not _PLAN_CLASS:
        _PLAN_CLASS.append(_plan_class())
    out = DataFrame(_PLAN_CLASS[0](df._plan, suppressed, time_col), df.sparkSession)
    try:
        out.schema  # noqa: B018 (analysis on the server)
    except Exception as e:
        err = translate(e)
        if err is e:
            raise
        raise err from None
    return out


# --- errors -----------------------------------------------------------------------------------

# pyspark shows a server exception it has no Python class for as "(<Java class>) <message>".
_UNKNOWN_SERVER_ERROR = re.compile(r"^\((sluice\.[\w.$]+)\) (.*)$", re.DOTALL)


def translate(exc: BaseException) -> BaseException:
    """A sluice error for a Connect error raised by sluice on the server; else ``exc``."""
    from sluice._jvm import translation_for

    getter = getattr(exc, "getMessage", None)
    message = getter() if callable(getter) else str(exc)
    if "No handler found for extension" in message:
        return SluiceError(
            "the Spark Connect server does not load sluice's relation plugin, which suppress needs: "
            f"start it with --jars <sluice.jar_path()> and --conf {CONNECT_RELATION_CLASSES_KEY}="
            f"{CONNECT_RELATION_PLUGIN} (and the other sluice keys: "
            + ", ".join(f"{k}={v}" for k, v in LOADING_SETTINGS.items() if k != CONNECT_RELATION_CLASSES_KEY)
            + ")")
    m = _UNKNOWN_SERVER_ERROR.match(message)
    if m is None:
        return exc
    java_class, text = m.group(1), m.group(2).split("\n\nJVM stacktrace:", 1)[0]
    return translation_for(java_class)(text, java_class)
