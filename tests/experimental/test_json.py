"""sluice's from_json decoding (``json_decoder="sluice"``, ``spark.sluice.json.decoder``): a streaming
query parsing JSON with ``from_json`` gives the same results with it as with Spark's parser,
across a restart on its checkpoint, with malformed records and ill-formed UTF-8 among the input.
The decoder keeps no state: the query's state store is Spark's default provider's (a provider
parameter would run the same decoding twice)."""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

import sluice
from sluice import BufferConfig, Suppressed, suppress
from support.session import session_conf
from support.sinks import batch_file_sink

KEY = "spark.sluice.json.decoder"
SCHEMA = T.StructType([
    T.StructField("k", T.StringType()), T.StructField("ts", T.LongType()), T.StructField("n", T.LongType()),
    T.StructField("meta", T.StructType([T.StructField("w", T.DoubleType()), T.StructField("ok", T.BooleanType()),
                                        T.StructField("rank", T.LongType())])),
    T.StructField("note", T.StringType())])
# What the query reads of SCHEMA, all that sluice's decoder builds.
READ = "struct<k:string,ts:bigint,n:bigint,meta:struct<w:double,ok:boolean>>"


def lines(seed: int, batch: int, count: int) -> list[bytes]:
    """One batch's records: mostly well-formed events, some each of what only Spark's parser decides."""
    r = random.Random(seed * 1000 + batch)
    out = []
    for i in range(count):
        ts = batch * 10_000 + i * 10_000 // count
        ev = {"k": r.choice(["a", "b", "é", "😀"]), "ts": ts, "n": r.randint(-5, 9),
              "meta": {"w": r.random(), "ok": r.random() < 0.5, "rank": r.randint(0, 99)}, "note": r.choice(["x", "é"]),
              "extra": {"x": [1, 2]}}
        text = json.dumps(ev, ensure_ascii=r.random() < 0.5).encode()
        kind = r.randrange(14)
        if kind == 0:
            text = text.replace(b'"n": ', b'"n": "', 1).replace(b', "meta"', b'", "meta"', 1)  # a string for a number
        elif kind == 1:
            text = text[:-3]  # truncated
        elif kind == 2:
            text = text.replace(b'"k": "', b'"k": "\xc0\xaf', 1)  # an overlong form inside a string
        elif kind == 3:
            text = text.replace(b'"', b"'")  # single quotes, which Spark's parser allows
        elif kind == 4:
            text = text.replace(b'"rank": ', b'"rank": "', 1).replace(b'}, "note"', b'"}, "note"', 1)  # in a field not read
        out.append(text)
    return out


def start(spark: SparkSession, src: Path, out: Path, ckpt: Path) -> Any:
    events = (spark.readStream.option("maxFilesPerTrigger", 1).text(str(src))
              .select(F.inline(F.array(F.from_json("value", SCHEMA))))
              .select(F.coalesce("k", F.lit("?")).alias("k"), F.timestamp_millis(F.coalesce("ts", F.lit(0))).alias("t"),
                      "n", "meta.w", "meta.ok"))
    counts = (events.withWatermark("t", "5 seconds").groupBy(F.window("t", "10 seconds"), "k")
              .agg(F.count("*").alias("c"), F.sum("n").alias("s"), F.sum("w").alias("w"),
                   F.sum(F.col("ok").cast("int")).alias("ok")))
    final = suppress(counts, Suppressed.until_window_closes(BufferConfig.unbounded()))
    return (final.writeStream.outputMode("update").option("checkpointLocation", str(ckpt))
            .foreachBatch(batch_file_sink(str(out), lambda row: [row.window.start.isoformat(), row.k, row.c, row.s,
                                                                  round(row.w, 9) if row.w is not None else None,
                                                                  row.ok]))
            .start())


def results(out: Path) -> list[list[Any]]:
    return sorted(r for f in sorted(out.glob("*.json")) for r in json.loads(f.read_text()))


def run(spark: SparkSession, tmp: Path, decoder: str, batches: list[list[bytes]], restart_after: int | None,
        capsys: pytest.CaptureFixture[str]) -> tuple[list[list[Any]], str]:
    """The query's final results, and its physical plan as `explain()` prints it."""
    src, out, ckpt = tmp / "in", tmp / "out", tmp / "ckpt"
    for d in (src, out):
        d.mkdir(parents=True)
    with session_conf(spark, {KEY: decoder}):  # read when the query is planned: each start takes it
        q = start(spark, src, out, ckpt)
        for i, b in enumerate(batches):
            (src / f"part-{i:05d}.txt").write_bytes(b"\n".join(b) + b"\n")
            q.processAllAvailable()
            if restart_after == i:
                q.stop()
                q = start(spark, src, out, ckpt)
        capsys.readouterr()
        q.explain()
        plan = capsys.readouterr().out
        q.stop()
    return results(out), plan


def test_streaming_results_equal_spark_parser_across_a_restart(spark: SparkSession, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    batches = [lines(seed=3, batch=b, count=400) for b in range(6)] + [[b'{"k":"flush","ts":900000,"n":0}']]
    expected, spark_plan = run(spark, tmp_path / "spark", "spark", batches, None, capsys)
    actual, sluice_plan = run(spark, tmp_path / "sluice", "sluice", batches, 2, capsys)
    assert "sluice_from_json" in sluice_plan and "sluice_from_json" not in spark_plan
    assert READ in sluice_plan
    assert len(expected) > 20  # windows of every batch, per key
    assert actual == expected


def test_bad_value_fails_at_configure() -> None:
    with pytest.raises(ValueError, match=r"Invalid value 'fast' for spark\.sluice\.json\.decoder: expected .*spark, sluice"):
        sluice.configure(SparkSession.builder, json_decoder="fast")
