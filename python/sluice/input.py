"""Names for sluice's input bound (KIP-770), which needs no Python API: it applies to every Kafka,
file and rate source of a query once sluice is configured.

``MAX_BYTES_PER_TRIGGER`` is the source option overriding ``spark.sluice.input.buffer.max.bytes``
for one source; ``BYTES_METRIC`` and ``THROTTLED_METRIC`` are the keys sluice adds to each bounded
source's ``metrics`` in the query progress.
"""

from __future__ import annotations

from sluice import _conf

__all__ = ["MAX_BYTES_PER_TRIGGER", "BYTES_METRIC", "THROTTLED_METRIC"]  # noqa: F822 (module __getattr__)

# Where each name is in conf.json's contract.input, which the JVM side reads too.
_CONTRACT = {
    "MAX_BYTES_PER_TRIGGER": "source_option",
    "BYTES_METRIC": "bytes_metric",
    "THROTTLED_METRIC": "throttled_metric",
}


def __getattr__(name: str) -> str:
    # Read on first use (the jar's conf.json), not at import.
    if name in _CONTRACT:
        return str(_conf.contract()["input"][_CONTRACT[name]])
    raise AttributeError(name)
