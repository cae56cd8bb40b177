"""input.kafka.direct: a micro-batch's Kafka records handed over by sluice's direct reader, as rows
pointing at the records' own fields, instead of Spark's copy of each into a generic and then an
unsafe row. On a real broker: the rows are Spark's (also where offsets hold no visible record, as
transaction markers and aborted records, and where retention deleted offsets a batch was to read),
the input bound still measures them, a source with headers keeps Spark's reader, and stateful final
results are the same across restarts that switch the reader and replay a batch, on every state
store."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sluice import input as sluice_input
from sluice._conf import spec, state_store_providers
from support import kafka as kh
from support.kafka import kafka_session
from support.session import driver_log, session_conf, stop_session
from support.window_model import BATCHES, DELAY, SIZE, T0, Run, final, model, ts

# dev/test: run on every supported Spark minor
pytestmark = [pytest.mark.every_minor, pytest.mark.kafka]

KEY = "spark.sluice.input.kafka.direct"
COLUMNS = ["partition", "offset", "key", "value", "topic", "timestamp", "timestampType"]


@pytest.fixture(scope="module")
def kspark(broker: kh.Broker) -> Iterator[SparkSession]:
    yield kafka_session(conf={"spark.sql.shuffle.partitions": "2"})
    stop_session()


@pytest.fixture
def store(request: pytest.FixtureRequest, kspark: SparkSession) -> Iterator[str]:
    # "cache": sluice's record cache in front of its default delegate (RocksDB)
    providers = {**state_store_providers(), "cache": spec()["caching_provider"]}
    with session_conf(kspark, {"spark.sql.streaming.stateStore.providerClass": providers[request.param]}):
        yield request.param


def source(spark: SparkSession, broker: kh.Broker, topic: str, direct: bool, **options: Any) -> DataFrame:
    """The topic as a streaming DataFrame; the setting is read when the source is loaded."""
    with session_conf(spark, {KEY: str(direct).lower()}):
        reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest"))
        return reader.options(**{k: str(v) for k, v in options.items()}).load()


def produce_mixed(spark: SparkSession, broker: kh.Broker, topic: str, n: int, partitions: int,
                  headers: bool = False) -> None:
    """`n` records round-robin over the partitions: null keys, null values and empty values among
    them, values of different lengths; with `headers`, every third record carries two headers."""
    cols = ["cast(pmod(id, {p}) as int) as partition".format(p=partitions),
            "if(pmod(id, 7) = 3, null, cast(concat('k', id) as binary)) as key",
            "case when pmod(id, 11) = 5 then null when pmod(id, 13) = 4 then cast('' as binary) "
            "else cast(repeat(concat('v', id), 1 + cast(pmod(id, 9) as int)) as binary) end as value"]
    if headers:
        cols.append("if(pmod(id, 3) = 0, array(named_struct('key', 'h', 'value', cast(id as string)), "
                    "named_struct('key', 'g', 'value', cast(null as binary))), null) as headers")
    (spark.range(n, numPartitions=1).selectExpr(*cols)
     .write.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic)
     .option("includeHeaders", str(headers).lower()).save())


class Batches:
    """A foreachBatch sink keeping each batch's rows (the given columns, sorted) by batch id."""

    def __init__(self, columns: list[str]) -> None:
        self.columns = columns
        self.rows: dict[int, list[tuple]] = {}

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        self.rows[batch_id] = sorted((tuple(r) for r in df.select(*self.columns).collect()), key=repr)

    def all(self) -> list[tuple]:
        return sorted((r for rows in self.rows.values() for r in rows), key=repr)


def drain(df: DataFrame, sink: Callable[[DataFrame, int], None], checkpoint: Path) -> dict[int, dict[str, str]]:
    """Runs the query until its input is processed; each batch with input's source metrics."""
    q = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint)).start()
    try:
        q.processAllAvailable()
        return {p["batchId"]: p["sources"][0]["metrics"] for p in q.recentProgress if p["numInputRows"] > 0}
    finally:
        q.stop()


def batch_read(spark: SparkSession, broker: kh.Broker, topic: str, columns: list[str], **options: str) -> list[tuple]:
    """The topic read by Spark's batch Kafka source (its own reader, never sluice's)."""
    df = (spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
          .option("subscribe", topic).options(**options).load())
    return sorted((tuple(r) for r in df.select(*columns).collect()), key=repr)


def test_the_direct_reader_hands_over_sparks_rows_and_the_bound_still_measures_them(
        kspark: SparkSession, broker: kh.Broker, tmp_path: Path) -> None:
    kh.create_topic(kspark, broker.bootstrap, "rows", 3)
    produce_mixed(kspark, broker, "rows", 400, 3)
    expected = batch_read(kspark, broker, "rows", COLUMNS)
    assert len(expected) == 400
    assert any(r[2] is None for r in expected) and any(r[3] is None for r in expected)
    assert any(r[3] == bytearray() for r in expected)

    runs = {}
    for direct in (True, False):
        sink = Batches(COLUMNS)
        # minPartitions: each batch splits a partition's range over several readers
        metrics = drain(source(kspark, broker, "rows", direct, maxOffsetsPerTrigger=90, minPartitions=5), sink,
                        tmp_path / str(direct))
        runs[direct] = (sink, metrics)
    on, on_metrics = runs[True]
    off, off_metrics = runs[False]
    assert on.all() == expected and off.all() == expected
    assert len(on.rows) >= 4 and on.rows == off.rows  # the same offsets per batch, the same rows
    for batch_id, rows in on.rows.items():
        m = on_metrics[batch_id]
        assert int(m[sluice_input.DIRECT_RECORDS_METRIC]) == len(rows)
        # the input bound measures key + value bytes from the rows the direct reader hands over
        assert int(m[sluice_input.BYTES_METRIC]) == sum(len(r[2] or b"") + len(r[3] or b"") for r in rows)
        assert m[sluice_input.BYTES_METRIC] == off_metrics[batch_id][sluice_input.BYTES_METRIC]
    assert all(sluice_input.DIRECT_RECORDS_METRIC not in m for m in off_metrics.values())


def test_a_source_with_headers_keeps_sparks_reader(kspark: SparkSession, broker: kh.Broker, tmp_path: Path) -> None:
    kh.create_topic(kspark, broker.bootstrap, "headers", 2)
    produce_mixed(kspark, broker, "headers", 60, 2, headers=True)
    columns = COLUMNS + ["headers"]
    expected = batch_read(kspark, broker, "headers", columns, includeHeaders="true")
    assert sum(r[-1] is not None for r in expected) == 20
    sink = Batches(columns)
    # the source is named, with why, in one INFO line when it is loaded (an experimental rewrite's note)
    jvm = kspark.sparkContext._jvm
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel("sluice.rewrites", jvm.org.apache.logging.log4j.Level.INFO)
    with driver_log("sluice.rewrites") as lines:
        df = source(kspark, broker, "headers", True, includeHeaders="true")
        assert lines() == ["INFO sluice: Kafka records read directly did not apply to the Kafka source (subscribe=headers): "
                           "it reads the records' headers (includeHeaders=true), whose column only Spark's reader builds"]
    metrics = drain(df, sink, tmp_path / "cp")
    assert sink.all() == expected
    assert metrics and all(m[sluice_input.DIRECT_RECORDS_METRIC] == "0" for m in metrics.values())


BYTES_SERIALIZER = "org.apache.kafka.common.serialization.ByteArraySerializer"


def produce_transactions(spark: SparkSession, broker: kh.Broker, topic: str, partitions: int) -> tuple[int, int]:
    """Transactions of 1, 4, 7, 10 and 13 records round-robin over the partitions, every third aborted:
    each commit or abort leaves an offset on every partition it wrote with no record visible at it,
    and under read_committed an aborted transaction's records are not visible either. (records, the
    committed ones)."""
    jvm = spark._jvm
    props = jvm.java.util.Properties()
    for k, v in {"bootstrap.servers": broker.bootstrap, "transactional.id": f"sluice-{topic}",
                 "key.serializer": BYTES_SERIALIZER, "value.serializer": BYTES_SERIALIZER}.items():
        props.setProperty(k, v)
    producer = jvm.org.apache.kafka.clients.producer.KafkaProducer(props)
    n = committed = 0
    try:
        producer.initTransactions()
        for t in range(15):
            producer.beginTransaction()
            size = 1 + 3 * (t % 5)
            for _ in range(size):
                producer.send(jvm.org.apache.kafka.clients.producer.ProducerRecord(
                    topic, n % partitions, f"k{n}".encode(), f"v{n}".encode()))
                n += 1
            if t % 3 == 2:
                producer.flush()  # written, then aborted (an abort drops what is not sent yet)
                producer.abortTransaction()
            else:
                producer.commitTransaction()
                committed += size
    finally:
        producer.close()
    return n, committed


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_offsets_without_a_visible_record_are_skipped_as_sparks_reader_skips_them(
        kspark: SparkSession, broker: kh.Broker, tmp_path: Path, isolation: str) -> None:
    """Transaction markers (and, read committed, aborted records) between and at the ends of batches
    whose ranges split partitions over several readers: the direct reader hands over Spark's rows."""
    topic = f"tx_{isolation}"
    kh.create_topic(kspark, broker.bootstrap, topic, 2)
    records, committed = produce_transactions(kspark, broker, topic, 2)
    options = {"kafka.isolation.level": isolation}
    expected = batch_read(kspark, broker, topic, COLUMNS, **options)
    assert len(expected) == (committed if isolation == "read_committed" else records)
    runs = {}
    for direct in (True, False):
        sink = Batches(COLUMNS)
        drain(source(kspark, broker, topic, direct, maxOffsetsPerTrigger=7, minPartitions=3, **options), sink,
              tmp_path / str(direct))
        runs[direct] = sink
    assert runs[True].all() == expected
    assert len(runs[True].rows) >= 5 and runs[True].rows == runs[False].rows


@pytest.mark.parametrize("fail_on_data_loss", [False, True])
def test_records_lost_to_retention_are_skipped_or_fail_the_query_as_in_sparks_reader(
        kspark: SparkSession, broker: kh.Broker, tmp_path: Path, fail_on_data_loss: bool) -> None:
    """A restarted query whose next batch starts at offsets retention deleted meanwhile: skipped as
    Spark's reader skips them, or the query fails as Spark's fails."""
    outcomes = {}
    for direct in (True, False):
        topic = f"lost_{fail_on_data_loss}_{direct}"
        kh.create_topic(kspark, broker.bootstrap, topic, 1)
        produce_mixed(kspark, broker, topic, 20, 1)
        sink = Batches(COLUMNS[:4])

        def run() -> str | None:
            df = source(kspark, broker, topic, direct, maxOffsetsPerTrigger=20,
                        failOnDataLoss=str(fail_on_data_loss).lower())
            q = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / str(direct))).start()
            try:
                q.processAllAvailable()
                return None
            except Exception as e:  # noqa: BLE001 (the query's failure is the outcome compared)
                return type(e).__name__
            finally:
                q.stop()

        assert run() is None and len(sink.rows) == 1
        produce_mixed(kspark, broker, topic, 40, 1)  # offsets 20-59
        kh.delete_records(kspark, broker.bootstrap, topic, 30)
        failure = run()
        outcomes[direct] = (failure, {b: [r[1:] for r in rows] for b, rows in sink.rows.items()})
    failure, rows = outcomes[True]
    assert outcomes[True] == outcomes[False]
    if fail_on_data_loss:
        assert failure is not None
    else:
        assert failure is None
        # the batch after the restart starts where retention left the log
        assert sorted(r[0] for b in sorted(rows)[1:] for r in rows[b]) == list(range(30, 60))


class KafkaRun(Run):
    """support.window_model's Run over a Kafka topic: each feed produces its events (key the user, value the
    event time and v as JSON), and the query reads them in one micro-batch; the direct reader is
    on or off per start."""

    def __init__(self, spark: SparkSession, broker: kh.Broker, root: Path, topic: str,
                 build: Callable[[DataFrame], DataFrame], mode: str) -> None:
        super().__init__(spark, root, build, mode)
        self.broker, self.topic = broker, topic
        self.segments: list[tuple[bool, list[dict[str, str]]]] = []
        kh.create_topic(spark, broker.bootstrap, topic, 2)

    def start(self, direct: bool) -> None:  # type: ignore[override]
        raw = source(self.spark, self.broker, self.topic, direct)
        events = raw.select(F.col("key").cast("string").alias("user"),
                            F.from_json(F.col("value").cast("string"), "ts timestamp, v long").alias("e")
                            ).select("e.ts", "user", "e.v")
        seen = self.first, self.replayed

        def sink(batch: DataFrame, batch_id: int) -> None:
            rows = sorted(tuple(r) for r in batch.select(
                F.col("window.start").cast("long") - int(T0.timestamp()), "user", "n", "total", "top").collect())
            (seen[1] if batch_id in seen[0] else seen[0])[batch_id] = rows

        self.query = (self.build(events).writeStream.outputMode(self.mode).foreachBatch(sink)
                      .option("checkpointLocation", str(self.ckpt)).start())
        self.segments.append((direct, []))

    def feed(self, *batches: list[tuple]) -> None:
        for events in batches:
            rows = [(u, json.dumps({"ts": ts(t), "v": v})) for t, u, v in events]
            (self.spark.createDataFrame(rows, "key string, value string").write.format("kafka")
             .option("kafka.bootstrap.servers", self.broker.bootstrap).option("topic", self.topic).save())
            self.query.processAllAvailable()

    def stop(self, forget_last_commit: bool = False) -> None:
        self.segments[-1][1].extend(p["sources"][0]["metrics"] for p in self.query.recentProgress
                                    if p["numInputRows"] > 0)
        super().stop(forget_last_commit)


@pytest.mark.parametrize("store", ["hdfs", "rocksdb", "in_memory_window", "cache"], indirect=True)
def test_final_results_across_restarts_that_switch_the_reader_and_replay_a_batch(
        kspark: SparkSession, broker: kh.Broker, tmp_path: Path, store: str) -> None:
    """Direct for three batches, Spark's reader after a restart, direct again after another; each
    restart replays the batch the stop left uncommitted with the other reader, and the replay emits
    what the batch emitted the first time. Final results: suppress until_window_closes."""
    def build(df: DataFrame) -> DataFrame:
        return final(df.withWatermark("ts", f"{DELAY} seconds").groupBy(F.window("ts", f"{SIZE} seconds"), "user")
                     .agg(F.count("*").alias("n"), F.sum("v").alias("total"), F.max("v").alias("top")))

    run = KafkaRun(kspark, broker, tmp_path, f"final_{store}", build, "update")
    try:
        for segment, (direct, batches) in enumerate([(True, BATCHES[:3]), (False, BATCHES[3:5]), (True, BATCHES[5:])]):
            run.start(direct)
            run.feed(*batches)
            run.stop(forget_last_commit=segment < 2)
    finally:
        if run.query is not None:
            run.stop()
    expected = model(SIZE, SIZE)
    assert len(expected) >= 8
    assert run.emitted() == expected
    assert len(run.replayed) == 2 and {b: run.first[b] for b in run.replayed} == run.replayed
    # Each segment's batches with input: read by the direct reader exactly when it was on.
    for direct, metrics in run.segments:
        assert metrics
        if direct:
            assert all(int(m[sluice_input.DIRECT_RECORDS_METRIC]) > 0 for m in metrics), metrics
        else:
            assert all(sluice_input.DIRECT_RECORDS_METRIC not in m for m in metrics), metrics
