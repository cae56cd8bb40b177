"""Kafka Streams' ``Stores`` factory for the in-memory window store sluice adds to Spark (KIP-428);
the Scala side is ``sluice.windowstore.Stores``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pyspark.sql import SparkSession

__all__ = ["Stores", "InMemoryWindowStoreSupplier"]

from sluice import _conf
from sluice._conf import supplier_message
from sluice._configure import configure


def _java_duration(d: timedelta) -> str:
    """``d`` as java.time.Duration prints it (PT1H30M, PT0.5S), as Kafka's messages show it."""
    micros = (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds
    if micros == 0:
        return "PT0S"
    seconds, frac = divmod(micros, 1_000_000)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    out = "PT" + (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "")
    if secs or frac:
        out += str(secs) + (("." + f"{frac:06d}".rstrip("0")) if frac else "") + "S"
    return out


def _millis(d: Any, what: str) -> int:
    if d is None:
        raise TypeError(supplier_message("null", what=what))
    if not isinstance(d, timedelta):
        raise TypeError(f"{what} must be a datetime.timedelta, got {type(d).__name__}")
    if d < timedelta(0):
        raise ValueError(supplier_message("negative", what=what))
    return (d.days * 86400 + d.seconds) * 1000 + d.microseconds // 1000


class InMemoryWindowStoreSupplier:
    """Selects sluice's in-memory window store as the session's state store provider."""

    def __init__(self, name: str, retention: timedelta, window_size: timedelta, grace: timedelta) -> None:
        self.name = name
        self.retention = retention
        self.window_size = window_size
        self.grace = grace

    @property
    def settings(self) -> dict[str, str]:
        """The ``spark.sluice.windowstore.*`` settings (milliseconds) this supplier stands for. Window
        size and grace only bound the retention (checked when the supplier is built, as Kafka does):
        the store itself needs only the retention."""
        return {
            _conf.key("windowstore.name"): self.name,
            _conf.key("windowstore.retention"): str(_millis(self.retention, "retentionPeriod")),
        }

    def configure(self, builder: SparkSession.Builder) -> SparkSession.Builder:
        """Adds sluice to ``builder``, selects the provider and sets retention, size and grace."""
        configure(builder, state_store="in_memory_window")
        for key, value in self.settings.items():
            builder.config(key, value)
        return builder

    def __repr__(self) -> str:
        return (
            f"InMemoryWindowStoreSupplier(name={self.name!r}, retention={self.retention!r}, "
            f"window_size={self.window_size!r}, grace={self.grace!r})"
        )


class Stores:
    """Factories for state store suppliers, after Kafka Streams' ``Stores``."""

    @staticmethod
    def in_memory_window_store(
        name: str, retention: timedelta, window_size: timedelta, grace: timedelta
    ) -> InMemoryWindowStoreSupplier:
        """An in-memory window store: state segmented by window start; windows starting at or
        before stream time minus ``retention`` are dropped, and so are later puts into them.

        Raises ``TypeError`` for a missing name or a non-timedelta argument and ``ValueError``
        (with Kafka's messages) for negative durations, a window size or grace period larger than
        the retention period.
        """
        if name is None:
            raise TypeError(supplier_message("null", what="name"))
        retention_ms = _millis(retention, "retentionPeriod")
        size_ms = _millis(window_size, "windowSize")
        grace_ms = _millis(grace, "gracePeriod")
        if size_ms > retention_ms:
            raise ValueError(
                supplier_message(
                    "retention_below_size",
                    name=name,
                    size=_java_duration(window_size),
                    retention=_java_duration(retention),
                )
            )
        if grace_ms > retention_ms:
            raise ValueError(
                supplier_message(
                    "grace_above_retention", name=name, grace=_java_duration(grace), retention=_java_duration(retention)
                )
            )
        return InMemoryWindowStoreSupplier(name, retention, window_size, grace)
