"""Python-side checks of sluice options, mirroring sluice.conf.SluiceConf, so bad values fail
before any Spark work."""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

PREFIX = "spark.sluice."

_BYTE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
               "g": 1 << 30, "gb": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "p": 1 << 50, "pb": 1 << 50}
_TIME_UNITS_MS = {"": 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
                  "d": 86_400_000}
_NUMBER_WITH_UNIT = re.compile(r"^([0-9]+)\s*([a-z]*)$")


def _parse_with_units(value: Any, units: dict[str, int]) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    m = _NUMBER_WITH_UNIT.match(str(value).strip().lower())
    if not m or m.group(2) not in units:
        return None
    return int(m.group(1)) * units[m.group(2)]


def parse_bytes(value: Any) -> int | None:
    return _parse_with_units(value, _BYTE_UNITS)


def parse_millis(value: Any) -> int | None:
    if isinstance(value, timedelta):
        return int(value.total_seconds() * 1000)
    return _parse_with_units(value, _TIME_UNITS_MS)


@dataclass(frozen=True)
class Option:
    """A ``configure()`` option: the snake_case name of a ``spark.sluice.*`` key."""

    key: str
    expected: str
    parse: Callable[[Any], Any]
    minimum: int = 0

    def to_conf(self, value: Any) -> str:
        parsed = self.parse(value)
        if parsed is None or (isinstance(parsed, int) and parsed < self.minimum):
            at_least = f", at least {self.minimum}" if not isinstance(parsed, str) else ""
            raise ValueError(f"Invalid value {value!r} for {self.key}: expected {self.expected}{at_least}")
        return str(parsed)


# state_store: the state store provider a name selects (spark.sql.streaming.stateStore.providerClass).
STATE_STORE_PROVIDERS = {
    "in_memory_window": "sluice.windowstore.InMemoryWindowStoreProvider",
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}


def parse_state_store(value: Any) -> str | None:
    return STATE_STORE_PROVIDERS.get(str(value).strip().lower()) if isinstance(value, str) else None


_BYTES = "a byte size: a number of bytes or a Spark byte string such as 64m or 1g"
_MILLIS = "a duration: milliseconds, a timedelta or a Spark time string such as 30s"

CACHING_PROVIDER = "sluice.cache.CachingStateStoreProvider"


@dataclass(frozen=True)
class _FlagOption(Option):
    """A boolean option that sets `key` to `value_if_true` when True and leaves it alone when False."""

    value_if_true: str = ""

    def to_conf(self, value: Any) -> str | None:
        if not isinstance(value, bool):
            raise ValueError(f"Invalid value {value!r} for {self.key}: expected {self.expected}")
        return self.value_if_true if value else None


@dataclass(frozen=True)
class _ChoiceOption(Option):
    """An option whose value is one of a few names (case-insensitive)."""

    allowed: tuple[str, ...] = ()

    def to_conf(self, value: Any) -> str:
        v = str(value).strip().lower()
        if v not in self.allowed:
            raise ValueError(f"Invalid value {value!r} for {self.key}: expected one of {', '.join(self.allowed)}")
        return v


OPTIONS: dict[str, Option] = {
    "statestore_cache_max_bytes": Option(PREFIX + "statestore.cache.max.bytes", _BYTES, parse_bytes),
    "input_buffer_max_bytes": Option(PREFIX + "input.buffer.max.bytes", _BYTES, parse_bytes, minimum=1),
    "commit_interval_ms": Option(PREFIX + "commit.interval.ms", _MILLIS, parse_millis),
    "state_store": Option("spark.sql.streaming.stateStore.providerClass",
                          "one of " + ", ".join(STATE_STORE_PROVIDERS), parse_state_store),
    # record cache (sluice.cache)
    "state_store_cache": _FlagOption("spark.sql.streaming.stateStore.providerClass", "True or False",
                                     lambda v: v, value_if_true=CACHING_PROVIDER),
    "statestore_cache_delegate": _ChoiceOption(PREFIX + "statestore.cache.delegate", "", lambda v: v,
                                               allowed=("rocksdb", "hdfs", "in_memory_window")),
}
