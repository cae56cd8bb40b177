"""Names for sluice's input bound (KIP-770), which needs no Python API: it applies to every Kafka,
file and rate source of a query once sluice is configured.

``MAX_BYTES_PER_TRIGGER`` is the source option overriding ``spark.sluice.input.buffer.max.bytes``
for one source; ``BYTES_METRIC`` and ``THROTTLED_METRIC`` are the keys sluice adds to each bounded
source's ``metrics`` in the query progress.
"""
__all__ = ["MAX_BYTES_PER_TRIGGER", "BYTES_METRIC", "THROTTLED_METRIC"]

MAX_BYTES_PER_TRIGGER = "sluice.maxBytesPerTrigger"
BYTES_METRIC = "inputBufferBytesTotal"
THROTTLED_METRIC = "inputBufferThrottledPartitions"
