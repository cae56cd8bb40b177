"""input.buffer.max.bytes (KIP-770) on a real Kafka broker: the bytes (key + value) a query
admits per micro-batch stay within the bound, spread over the partitions with data waiting,
without starving, losing or repeating anything across restarts."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from support import kafka as kh
from support.kafka import KAFKA_FETCH_MAX_WAIT_MS, kafka_session
from support.metrics import executor_consumer_metrics
from support.session import session_conf, stop_session

BOUND = 2 << 20  # spark.sluice.input.buffer.max.bytes for this module

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def kspark(broker: kh.Broker) -> Iterator[SparkSession]:
    yield kafka_session(input_buffer_max_bytes=str(BOUND))
    stop_session()


class Recorder:
    """A foreachBatch sink keeping, per batch id, per partition: records, key+value bytes and the
    offset range. A batch re-run after a restart replaces its entry (same id, same offsets)."""

    def __init__(self, on_batch: Callable[[int], None] | None = None) -> None:
        self.batches: dict[int, dict[int, tuple[int, int, int, int]]] = {}
        self.on_batch = on_batch

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        rows = (df.groupBy("partition")
                .agg(F.count("*").alias("n"),
                     F.sum(F.coalesce(F.length("key"), F.lit(0)) + F.length("value")).alias("bytes"),
                     F.min("offset").alias("lo"), F.max("offset").alias("hi"))
                .collect())
        self.batches[batch_id] = {r.partition: (r.n, r.bytes, r.lo, r.hi) for r in rows}
        if self.on_batch is not None:
            self.on_batch(batch_id)

    def bytes(self, batch_id: int) -> int:
        return sum(v[1] for v in self.batches[batch_id].values())

    def assert_exactly_once(self, expected: dict[int, int]) -> None:
        """Every offset 0..n-1 of every partition was delivered in exactly one batch."""
        for partition, n in expected.items():
            ranges = sorted((lo, hi, cnt) for b in self.batches.values()
                            for p, (cnt, _, lo, hi) in b.items() if p == partition)
            assert sum(r[2] for r in ranges) == n, f"partition {partition}: {ranges}"
            nxt = 0
            for lo, hi, cnt in ranges:
                assert lo == nxt and hi - lo + 1 == cnt, f"partition {partition}: gap or repeat at {lo}"
                nxt = hi + 1
            assert nxt == n


def kafka_stream(spark: SparkSession, broker: kh.Broker, topic: str, **options: Any) -> DataFrame:
    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader.load()


def start(df: DataFrame, sink: Recorder, checkpoint: Path):  # type: ignore[no-untyped-def]
    return df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint)).start()


def source_metrics(query) -> dict[int, dict[str, str]]:  # type: ignore[no-untyped-def]
    return {p["batchId"]: p["sources"][0]["metrics"] for p in query.recentProgress
            if p["numInputRows"] > 0}


def drain(df: DataFrame, sink: Recorder, checkpoint: Path) -> dict[int, dict[str, str]]:
    """Runs a query until all available input is processed, stops it and returns its source metrics."""
    q = start(df, sink, checkpoint)
    try:
        q.processAllAvailable()
        return source_metrics(q)
    finally:
        q.stop()


def stop_after_batches(df: DataFrame, sink: Recorder, checkpoint: Path, batches: int) -> None:
    """Runs a query until `sink` has seen `batches` batches (mid-backlog), then stops it."""
    q = start(df, sink, checkpoint)
    deadline = time.monotonic() + 120
    while len(sink.batches) < batches and q.isActive and time.monotonic() < deadline:
        time.sleep(0.05)
    q.stop()


def test_mixed_size_backlog_is_consumed_in_batches_within_the_bound(
        kspark: SparkSession, broker: kh.Broker, tmp_path: Path) -> None:
    kh.create_topic(kspark, broker.bootstrap, "mixed", 3)
    kh.produce(kspark, broker.bootstrap, "mixed", 360, 3, min_bytes=100, max_bytes=100 * 1024)
    sink = Recorder()
    metrics = drain(kafka_stream(kspark, broker, "mixed"), sink, tmp_path / "cp")
    sink.assert_exactly_once({0: 120, 1: 120, 2: 120})
    ids = sorted(sink.batches)
    sizes = [sink.bytes(i) for i in ids]
    total = sum(sizes)
    assert total > 8 * BOUND  # a backlog of many bounds
    # The first batch, sized from a sample of the records read on the driver (no batch has
    # measured any yet), stays under the bound and uses a real part of it (the 1 MiB-a-record
    # default would admit 2 records); later ones stay within 10% of it.
    assert 0.3 * BOUND <= sizes[0] <= BOUND, sizes
    assert max(sizes[1:]) <= 1.1 * BOUND, sizes
    # ... and the bound is used, not just respected: steady batches carry most of it.
    steady = sizes[4:-2]  # after the slow start
    assert sum(steady) / len(steady) >= 0.6 * BOUND, sizes
    # Every busy partition progresses in every batch while the backlog lasts (no starvation).
    for i in ids[:-3]:
        assert set(sink.batches[i]) == {0, 1, 2}, sink.batches[i]
    # The source's progress reports what it admitted and how many partitions it throttled.
    for i in ids:
        assert int(metrics[i]["inputBufferBytesTotal"]) == sink.bytes(i)
    assert int(metrics[ids[1]]["inputBufferThrottledPartitions"]) == 3
    assert int(metrics[ids[-1]]["inputBufferThrottledPartitions"]) < 3


def test_empty_and_light_partitions_next_to_a_busy_one_are_not_throttled(
        kspark: SparkSession, broker: kh.Broker, tmp_path: Path) -> None:
    kh.create_topic(kspark, broker.bootstrap, "skew", 2)
    # Partition 0: a backlog of 60 records of ~50 KB; partition 1: empty.
    kh.produce(kspark, broker.bootstrap, "skew", 60, 1, min_bytes=50_000, max_bytes=50_001)

    def light_records_arrive(batch_id: int) -> None:
        if batch_id == 1:  # mid-backlog, three small records land in the empty partition
            kh.produce(kspark, broker.bootstrap, "skew", 3, 1, min_bytes=100, max_bytes=200,
                       first_partition=1)

    sink = Recorder(light_records_arrive)
    bound = 500_000
    metrics = drain(kafka_stream(kspark, broker, "skew", **{"sluice.maxBytesPerTrigger": bound}),
                    sink, tmp_path / "cp")
    sink.assert_exactly_once({0: 60, 1: 3})
    # The empty partition is never counted as throttled: only partition 0 is.
    assert all(int(m["inputBufferThrottledPartitions"]) <= 1 for m in metrics.values()), metrics
    light = [i for i, b in sink.batches.items() if 1 in b]
    assert len(light) == 1, "the light partition's three records came in one batch"
    (i,) = light
    assert sink.batches[i][1][0] == 3
    assert 0 in sink.batches[i] and int(metrics[i]["inputBufferThrottledPartitions"]) == 1
    assert all(sink.bytes(b) <= 1.1 * bound for b in sink.batches)


def test_restart_mid_backlog_loses_and_repeats_nothing(
        kspark: SparkSession, broker: kh.Broker, tmp_path: Path) -> None:
    kh.create_topic(kspark, broker.bootstrap, "restart", 3)
    kh.produce(kspark, broker.bootstrap, "restart", 300, 3, seed=3)
    sink = Recorder()
    checkpoint = tmp_path / "cp"
    stop_after_batches(kafka_stream(kspark, broker, "restart"), sink, checkpoint, 3)
    before = len(sink.batches)
    assert 3 <= before and sum(b[0] for x in sink.batches.values() for b in x.values()) < 300
    drain(kafka_stream(kspark, broker, "restart"), sink, checkpoint)
    assert len(sink.batches) > before
    sink.assert_exactly_once({0: 100, 1: 100, 2: 100})
    assert max(sink.bytes(i) for i in sink.batches) <= 1.1 * BOUND


def test_composes_with_max_offsets_per_trigger_smaller_wins(
        kspark: SparkSession, broker: kh.Broker, tmp_path: Path) -> None:
    kh.create_topic(kspark, broker.bootstrap, "compose", 2)
    kh.produce(kspark, broker.bootstrap, "compose", 100, 2, min_bytes=10_000, max_bytes=10_001)

    # The source's own limit is the smaller one: 10 records (~100 KB) per batch under a 1 MB bound.
    by_records = Recorder()
    metrics = drain(kafka_stream(kspark, broker, "compose", maxOffsetsPerTrigger=10,
                                 **{"sluice.maxBytesPerTrigger": "1m"}), by_records, tmp_path / "a")
    by_records.assert_exactly_once({0: 50, 1: 50})
    counts = {i: sum(v[0] for v in b.values()) for i, b in by_records.batches.items()}
    # After sluice's slow start (sizes still unknown), maxOffsetsPerTrigger decides every batch.
    assert max(counts.values()) == 10 and sum(v == 10 for v in counts.values()) >= 7, counts
    assert all(metrics[i]["inputBufferThrottledPartitions"] == "0" for i, c in counts.items() if c == 10)

    # The bound is the smaller one: ~100 KB per batch although 1000 records would be allowed.
    by_bytes = Recorder()
    drain(kafka_stream(kspark, broker, "compose", maxOffsetsPerTrigger=1000,
                       **{"sluice.maxBytesPerTrigger": "100k"}), by_bytes, tmp_path / "b")
    by_bytes.assert_exactly_once({0: 50, 1: 50})
    assert len(by_bytes.batches) >= 9
    assert all(by_bytes.bytes(i) <= 1.1 * 100 * 1024 for i in by_bytes.batches)


def test_backlog_under_the_bound_is_taken_in_one_batch(
        kspark: SparkSession, broker: kh.Broker, tmp_path: Path) -> None:
    """The common case costs no extra batches: ~1 MB waiting under the default 512 MB bound."""
    kh.create_topic(kspark, broker.bootstrap, "small", 2)
    kh.produce(kspark, broker.bootstrap, "small", 100, 2, min_bytes=10_000, max_bytes=10_001)
    sink = Recorder()
    metrics = drain(kafka_stream(kspark, broker, "small", **{"sluice.maxBytesPerTrigger": "512m"}),
                    sink, tmp_path / "cp")
    sink.assert_exactly_once({0: 50, 1: 50})
    assert list(sink.batches) == [0]
    assert metrics[0]["inputBufferThrottledPartitions"] == "0"
    assert int(metrics[0]["inputBufferBytesTotal"]) == sink.bytes(0)


def test_first_batch_of_a_fresh_query_is_sized_from_sampled_records(
        kspark: SparkSession, broker: kh.Broker, tmp_path: Path) -> None:
    """Before any batch, sluice samples record sizes on the driver: records of ~20 KB fill the
    first batch close to the bound (not one record per MiB), and within it."""
    kh.create_topic(kspark, broker.bootstrap, "known", 2)
    kh.produce(kspark, broker.bootstrap, "known", 300, 2, min_bytes=20_000, max_bytes=20_001)
    sink = Recorder()
    metrics = drain(kafka_stream(kspark, broker, "known"), sink, tmp_path / "cp")
    sink.assert_exactly_once({0: 150, 1: 150})
    first = sink.bytes(0)
    assert 0.9 * BOUND <= first <= BOUND, first
    assert sum(v[0] for v in sink.batches[0].values()) >= 90  # 2 MiB / 20 KB, not 2 records
    assert int(metrics[0]["inputBufferThrottledPartitions"]) == 2
    assert all(sink.bytes(i) <= 1.1 * BOUND for i in sink.batches)


def test_restart_sizes_its_first_batch_from_the_sizes_measured_before(
        kspark: SparkSession, broker: kh.Broker, tmp_path: Path) -> None:
    """Measured sizes are kept in the query's checkpoint: the first batch after a restart is sized
    from them, not from a sample. Records of 1-2 KB with one of 100 KB in ten: a sample can only
    assume every record is as large as the largest it saw (~7 records a partition); the measured
    mean and spread admit many more, still within the bound."""
    restart_sized_from_measured(kspark, broker, tmp_path, "resize")


def restart_sized_from_measured(spark: SparkSession, broker: kh.Broker, tmp_path: Path, topic: str) -> Path:
    """The restart test above on `topic`; returns the query's checkpoint."""
    kh.create_topic(spark, broker.bootstrap, topic, 3)
    kh.produce(spark, broker.bootstrap, topic, 900, 3, min_bytes=1000, max_bytes=2000,
               large_every=10, large_bytes=100_000)
    sink = Recorder()
    checkpoint = tmp_path / "cp"
    stop_after_batches(kafka_stream(spark, broker, topic), sink, checkpoint, 4)
    assert (checkpoint / "sources" / "0" / "sluice-record-sizes.json").is_file()
    done = len(sink.batches)
    resume = {p: max(b[p][3] for b in sink.batches.values() if p in b) + 1 for p in range(3)}

    # A fresh query from the same offsets, with nothing measured: one (sample-sized) batch.
    fresh = Recorder()
    starting = '{"%s":{%s}}' % (topic, ",".join(f'"{p}":{o}' for p, o in resume.items()))
    fq = (kafka_stream(spark, broker, topic, startingOffsets=starting).writeStream
          .foreachBatch(fresh).trigger(once=True).option("checkpointLocation", str(tmp_path / "f"))
          .start())
    fq.awaitTermination(120)
    assert fq.exception() is None

    drain(kafka_stream(spark, broker, topic), sink, checkpoint)
    sink.assert_exactly_once({0: 300, 1: 300, 2: 300})
    assert {p: v[2] for p, v in sink.batches[done].items()} == resume  # where the first run stopped
    assert {p: v[2] for p, v in fresh.batches[0].items()} == resume

    def records(r: Recorder, i: int) -> int:
        return sum(v[0] for v in r.batches[i].values())
    assert sink.bytes(done) <= 1.1 * BOUND and fresh.bytes(0) <= BOUND
    assert records(sink, done) >= 2 * records(fresh, 0), (records(sink, done), records(fresh, 0))
    assert all(sink.bytes(i) <= 1.1 * BOUND for i in sink.batches)
    return checkpoint


def test_trigger_available_now_drains_the_backlog_in_bounded_batches(
        kspark: SparkSession, broker: kh.Broker, tmp_path: Path) -> None:
    kh.create_topic(kspark, broker.bootstrap, "avail", 2)
    kh.produce(kspark, broker.bootstrap, "avail", 60, 2, min_bytes=1000, max_bytes=1001)
    sink = Recorder()
    q = (kafka_stream(kspark, broker, "avail", **{"sluice.maxBytesPerTrigger": "10000"}).writeStream
         .foreachBatch(sink).trigger(availableNow=True).option("checkpointLocation", str(tmp_path / "cp")).start())
    assert q.awaitTermination(120), "an availableNow query stops once the backlog is drained"
    metrics = source_metrics(q)
    sink.assert_exactly_once({0: 30, 1: 30})
    assert len(sink.batches) >= 60 * 1000 // 10000
    for i in sink.batches:
        assert sink.bytes(i) <= 10000, (i, sink.bytes(i))
        assert int(metrics[i]["inputBufferBytesTotal"]) == sink.bytes(i)


FETCH_RECORDS = 4000  # of ~1 KB on one partition: 4 MB, twice the module's bound


@pytest.fixture(scope="module")
def fetch_topic(kspark: SparkSession, broker: kh.Broker) -> str:
    kh.create_topic(kspark, broker.bootstrap, "fetchsize", 1)
    kh.produce(kspark, broker.bootstrap, "fetchsize", FETCH_RECORDS, 1, min_bytes=1000, max_bytes=1001)
    return "fetchsize"


@pytest.mark.parametrize("case", ["sluice", "source sets it", "source bound", "key 0"])
def test_a_poll_fetches_up_to_the_input_bound_unless_the_source_or_the_key_says_otherwise(
        kspark: SparkSession, broker: kh.Broker, fetch_topic: str, tmp_path: Path, case: str) -> None:
    """spark.sluice.input.fetch.max.bytes (default 8 MiB) sizes each partition's fetch, capped at the
    source's input bound (the module's 2 MiB), where the source sets no kafka.max.partition.fetch.bytes;
    the source's own option, a smaller source bound, or the key at 0 keep fetches within 1 MiB
    (Kafka's default). Every record is still read exactly once."""
    group = "fetch-" + case.replace(" ", "-")
    options: dict[str, Any] = {"groupIdPrefix": group, "kafka.metrics.sample.window.ms": 600_000}
    if case == "source sets it":
        options["kafka.max.partition.fetch.bytes"] = 1 << 20
    if case == "source bound":
        options["sluice.maxBytesPerTrigger"] = "1m"
    with session_conf(kspark, {"spark.sluice.input.fetch.max.bytes": "0"} if case == "key 0" else {}):
        df = kafka_stream(kspark, broker, fetch_topic, **options)
    sink = Recorder()
    drain(df, sink, tmp_path / "cp")
    sink.assert_exactly_once({0: FETCH_RECORDS})
    largest = max(executor_consumer_metrics(kspark, group, "fetch-size-max"))
    kafka_default = 1 << 20
    if case == "sluice":
        assert 1.5 * kafka_default < largest <= BOUND + (64 << 10), largest
    else:
        # Within the 1 MiB limit plus a fetch response's framing (record batches here are ~16 KB).
        assert largest <= kafka_default + (64 << 10), largest


@pytest.mark.parametrize("case", ["sluice", "source sets it"])
def test_a_task_reading_to_the_end_of_a_partition_does_not_wait_out_an_empty_fetch(
        kspark: SparkSession, broker: kh.Broker, fetch_topic: str, tmp_path: Path, case: str) -> None:
    """A micro-batch task that reads to the end of a partition leaves the consumer's read-ahead fetch with nothing
    to return, and the broker holds it fetch.max.wait.ms; the offset lookups Spark's reader makes after each poll
    wait behind it on the same connection. Where the source sets no kafka.fetch.max.wait.ms sluice sets 10 ms, so no
    fetch of the drain is held Kafka's 500 ms; a source's own setting is kept, and its read-ahead is held that long
    (the consumer's own fetch-latency-max). Every record is still read exactly once."""
    group = "wait-" + case.replace(" ", "-")
    options: dict[str, Any] = {"groupIdPrefix": group, "kafka.metrics.sample.window.ms": 600_000}
    if case == "source sets it":
        options["kafka.fetch.max.wait.ms"] = KAFKA_FETCH_MAX_WAIT_MS
    sink = Recorder()
    drain(kafka_stream(kspark, broker, fetch_topic, **options), sink, tmp_path / "cp")
    sink.assert_exactly_once({0: FETCH_RECORDS})
    held = max(executor_consumer_metrics(kspark, group, "fetch-latency-max"))
    if case == "sluice":
        assert held < KAFKA_FETCH_MAX_WAIT_MS, held
    else:
        assert held >= KAFKA_FETCH_MAX_WAIT_MS, held
