"""The rewrites outside the KIPs: the six removed ones (sliced state, state merged per row, window
slicing, partial aggregation by hash, Kafka records read directly, checkpoint files written directly)
and the one labelled experimental, the JSON decoder (conf.json's "removed" and "status").

- A removed key or configure() option fails before any Spark work (Python) and at session start
  (the JVM), saying when and why it went, not as an unknown name.
- A checkpoint whose aggregation sliced state wrote its marker into fails when the query starts.
- The driver names the experimental rewrites that are on in one warning at SparkContext start, and a
  rewrite that is on names a plan it leaves alone in one INFO line (here: the JSON decoder, on a
  streaming query's from_json with an option, once for all its micro-batches; the Scala suite
  sluice.plugin.ExperimentalRewritesSuite does the same for a batch query).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sluice
from sluice import _conf
from support.session import BASE_CONF, driver_log, fresh_builder, session_conf, sluice_session, stop_session

# dev/test: run on every supported Spark minor
pytestmark = pytest.mark.every_minor

# each removed key: its configure() option, the release that removed it, a phrase of its reason
REMOVED = {"spark.sluice.window.slicing.state": ("window_slicing_state", "0.1.0", "does not promise"),
           "spark.sluice.aggregate.state.merge": ("aggregate_state_merge", "0.1.0", "does not promise"),
           "spark.sluice.window.slicing": ("window_slicing", "0.2.0", "no gain beyond the run-to-run spread"),
           "spark.sluice.aggregate.partial.hash": ("aggregate_partial_hash", "0.2.0",
                                                   "no gain beyond the run-to-run spread"),
           "spark.sluice.input.kafka.direct": ("input_kafka_direct", "0.2.0", "no gain beyond the run-to-run spread"),
           "spark.sluice.checkpoint.local.direct": ("checkpoint_local_direct", "0.2.0",
                                                    "no gain beyond the run-to-run spread")}
MARKER = "_sluice_sliced_state"


def test_the_removed_keys_are_conf_jsons_and_no_longer_keys() -> None:
    removed = {_conf.spec()["prefix"] + r["name"]: (r["option"], r["version"]) for r in _conf.removed()}
    assert removed == {key: (option, version) for key, (option, version, _) in REMOVED.items()}
    keys = {_conf.spec()["prefix"] + k["name"] for k in _conf.spec()["keys"]}
    assert not keys & set(REMOVED)
    assert not {option for option, _, _ in REMOVED.values()} & set(_conf.options())
    assert _conf.experimental_keys() == ["spark.sluice.json.decoder"]


@pytest.mark.parametrize("key", sorted(REMOVED))
def test_configure_refuses_a_removed_option_or_key_saying_when_and_why(key: str) -> None:
    option, version, why = REMOVED[key]
    with pytest.raises(ValueError) as info:
        sluice.configure(SparkSession.builder, **{option: True})
    message = str(info.value)
    assert message.startswith(f"configure() option {option} was removed in sluice {version} ({key}): "), message
    assert message.endswith("; remove the option") and why in message, message
    with pytest.raises(ValueError) as info:
        sluice.configure(SparkSession.builder.config(key, "false"))
    message = str(info.value)
    assert message.startswith(f"{key} was removed in sluice {version}: ") and message.endswith("; remove the setting")
    assert "did you mean" not in message


@pytest.mark.parametrize("key", sorted(REMOVED))
def test_session_start_refuses_a_removed_key_in_one_line(key: str) -> None:
    """Set after configure() (as spark-defaults.conf or --conf would): the JVM's check, same text."""
    stop_session()
    builder = sluice.configure(fresh_builder().master("local[2]").appName("sluice-removed"))
    for k, v in {**BASE_CONF, key: "true"}.items():
        builder = builder.config(k, v)
    with pytest.raises(sluice.SluiceConfError) as info:
        builder.getOrCreate()
    message = str(info.value)
    assert _conf.removed_refusal(key) in message, message
    assert message.count("\n") == 0 and "did you mean" not in message
    assert SparkSession.getActiveSession() is None


def _session_start_log(conf: dict[str, str]) -> list[str]:
    from sluice._conf import PLUGIN_CLASS
    stop_session()
    with driver_log(PLUGIN_CLASS) as lines:
        sluice_session(conf=conf)
        return lines()


def test_one_warning_at_start_names_the_experimental_rewrites_that_are_on() -> None:
    assert _session_start_log({"spark.sluice.json.decoder": "sluice"}) == [
        "WARN sluice: experimental rewrites on: spark.sluice.json.decoder (see docs/features/experimental.md)"]
    assert _session_start_log({"spark.sluice.json.decoder": "spark"}) == []
    stop_session()


def _counts(spark: SparkSession, src: Path) -> object:
    events = spark.readStream.schema("ts timestamp, k string").json(str(src))
    return events.withWatermark("ts", "0 seconds").groupBy("k").count()


def _write(src: Path, name: str, rows: list[dict]) -> None:
    src.mkdir(parents=True, exist_ok=True)
    (src / name).write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_checkpoint_written_with_sliced_state_fails_at_start_naming_its_marker(tmp_path: Path) -> None:
    """The marker as sliced state wrote it, into the state directory of operator 0 of a checkpoint
    that ran a batch (Spark refuses a first batch over a state directory that is not empty): the
    restarted query fails when it plans its next batch, in one line saying what to do."""
    spark = sluice_session()
    src, ckpt = tmp_path / "in", tmp_path / "ckpt"
    _write(src, "0.json", [{"ts": "2024-01-01 00:00:01", "k": "a"}])

    rows: list[tuple] = []

    def start() -> object:  # a sink that can restart on its checkpoint (the memory sink cannot in update mode)
        return (_counts(spark, src).writeStream.outputMode("update")
                .foreachBatch(lambda batch, _: rows.extend(tuple(r) for r in batch.collect()))
                .option("checkpointLocation", str(ckpt)).start())

    q = start()
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    assert rows == [("a", 1)]

    (ckpt / "state" / "0" / MARKER).write_text("the state of operator 0 is kept per slice of its sliding windows\n")
    _write(src, "1.json", [{"ts": "2024-01-01 00:00:02", "k": "a"}])
    q = start()
    try:
        with pytest.raises(StreamingQueryException) as info:
            q.processAllAvailable()
    finally:
        q.stop()
    message = str(info.value)
    expected = (f"sluice: state operator 0 of the checkpoint at {ckpt} was written with sliced state "
                f"(spark.sluice.window.slicing.state; its marker file {MARKER} is in {ckpt / 'state' / '0'}), which "
                "sluice 0.1.0 removed: sluice cannot read that state any more. Start the query on a new checkpoint")
    assert expected in message.replace("file:", ""), message
    assert rows == [("a", 1)]


def test_the_json_decoder_names_a_streaming_from_json_it_leaves_to_spark_once_per_run(tmp_path: Path) -> None:
    """Three micro-batches, each planned anew: one INFO line for the run, naming the from_json and why
    (an option, which only Spark's parser reads); the rows are Spark's."""
    spark = sluice_session()
    src = tmp_path / "in"
    src.mkdir()
    (src / "0.txt").write_text('{"k": "a"}\n')
    jvm = spark.sparkContext._jvm
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        "sluice.rewrites", jvm.org.apache.logging.log4j.Level.INFO)
    with driver_log("sluice.rewrites") as lines:
        with session_conf(spark, {"spark.sluice.json.decoder": "sluice"}):
            parsed = spark.readStream.text(str(src)).select(
                F.from_json("value", "k string", {"mode": "PERMISSIVE"}).alias("e")).select("e.k")
            q = (parsed.writeStream.format("memory").queryName("json_with_an_option")
                 .option("checkpointLocation", str(tmp_path / "ckpt")).start())
        try:
            q.processAllAvailable()
            for i in (1, 2):
                (src / f"{i}.txt").write_text(f'{{"k": "{"bc"[i - 1]}"}}\n')
                q.processAllAvailable()
            assert q.lastProgress["batchId"] >= 2
        finally:
            q.stop()
        logged = lines()
    assert len(logged) == 1, logged
    assert logged[0].startswith("INFO sluice: the JSON decoder did not apply to from_json("), logged
    assert logged[0].endswith(": it has options (mode), which only Spark's parser reads"), logged
    assert sorted(r[0] for r in spark.sql("select k from json_with_an_option").collect()) == ["a", "b", "c"]
