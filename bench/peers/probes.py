"""Probes of bench/peers: one part of a Nexmark query's cost measured alone, in one Spark session (batch
jobs over data cached in memory, so that neither Kafka nor a stream's micro-batches are in the time).
They say where a drain's time goes and what a change there is worth (bench/RESULTS.md); the drains
themselves are bench.py's.

    probes.py [--probes decode,max-struct] [--events 2000000] [--rows 6000000] [--warmups 2] [--repeats 6]

decode      Nexmark's values (Peers nexmark-file: the backlog's records for the same seed), parsed as q7
            reads them: from_json with the event schema, the bids' four fields q7 keeps. Sides: Spark's
            parser (spark.sluice.json.decoder=spark, sluice's product default, measured first) and
            sluice's (=sluice, an EXPERIMENTAL rewrite, opt-in). Target: sluice >= Spark.
max-struct  q7's aggregation shape without the parse: rows of four longs grouped by a window number,
            max(struct(four longs)) (Spark's sort-based aggregation: its hash aggregation takes only
            fixed-width buffers) against four max(long) (hash aggregation). No target: what q7's
            sort before its partial aggregation costs (the experimental aggregate_partial_hash
            rewrite aggregates max(struct) by hash instead).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from harness import Harness  # noqa: E402
from pyspark import SparkConf, SparkContext  # noqa: E402
from pyspark.sql import DataFrame, SparkSession, functions as F  # noqa: E402
from pyspark.version import __version__ as PYSPARK_VERSION  # noqa: E402

import sluice  # noqa: E402
from bench import tool  # noqa: E402
from spark_side import EVENT  # noqa: E402

DECODER_KEY = "spark.sluice.json.decoder"
PROBES = ("decode", "max-struct")


def timed(df: DataFrame) -> float:
    """Seconds to run `df` to the end (Spark's no-op sink: every row made, none kept)."""
    t0 = time.monotonic()
    df.write.format("noop").mode("overwrite").save()
    return time.monotonic() - t0


def decode(spark: SparkSession, a: argparse.Namespace, work: Path) -> None:
    values = work / "nexmark.jsonl"
    made = tool("nexmark-file", "--out", values, "--events", a.events, "--event-rate", 10_000, "--seed", a.seed)
    text = spark.read.text(str(values)).repartition(2).cache()
    assert text.count() == a.events, "the cached values are not the generated events"

    def q7(side: str) -> DataFrame:
        spark.conf.set(DECODER_KEY, side)
        bids = text.select(F.inline(F.array(F.from_json("value", EVENT)))).where("event_type = 2")
        return bids.select("bid.price", "bid.dateTime", "bid.auction", "bid.bidder")

    # Both decoders must give the same rows, or the times compare nothing.
    digest = {side: q7(side).agg(F.count("*"), F.sum(F.pmod(F.xxhash64("*"), F.lit(1_000_000_007)))).first() for side in ("spark", "sluice")}
    assert digest["spark"] == digest["sluice"], f"the decoders differ: {digest}"
    h = Harness("peers_probe_decode", "q7's JSON parse alone: Spark's from_json parser (the product default) vs "
                "sluice's experimental decoder", {
        "input": f"{a.events:,} Nexmark events (seed {a.seed}, {made.get('bytes', 0):,} bytes of JSON), cached, "
                 "2 partitions, local[2]",
        "query": "from_json(value, the event schema), event_type = 2, the four bid fields q7 reads; noop sink",
        "spark": f"{DECODER_KEY}=spark (Spark {PYSPARK_VERSION}'s JSON parser; sluice's product default)",
        "sluice": f"{DECODER_KEY}=sluice (experimental: sluice.json.internal.RecordDecoder and its JsonScanner)",
        "rows": f"{digest['sluice'][0]:,} bids, the same on both sides",
        "runs": f"{a.warmups} warm-ups per side, then {a.repeats} repeats alternating",
    })

    def one(side: str, i: int) -> dict:
        s = timed(q7(side))
        return {"s": round(s, 3), "events_per_s": round(a.events / s)}

    h.alternating(["spark", "sluice"], a.repeats, one,
                  warmup=lambda side: [timed(q7(side)) for _ in range(a.warmups)])
    med = {side: sorted(r["events_per_s"] for r in h.runs[side])[len(h.runs[side]) // 2] for side in h.runs}
    print(f"   medians: spark {med['spark']:,} events/s, sluice {med['sluice']:,} events/s")
    h.target("sluice / Spark events/s (medians)", med["sluice"] / med["spark"], ">=", 1.0)
    h.write(medians=med)


def max_struct(spark: SparkSession, a: argparse.Namespace) -> None:
    # Four longs per row, in q7's proportions: one window per 100,000 rows (10 s of bids at Nexmark's
    # 10,000 events/s), the "bid" fields spread wide.
    rows = (spark.range(a.rows, numPartitions=2)
            .select((F.col("id") / 100_000).cast("long").alias("w"),
                    F.pmod(F.xxhash64("id"), F.lit(100_000_000)).alias("price"), F.col("id").alias("dateTime"),
                    F.pmod(F.xxhash64("id", F.lit(1)), F.lit(1_000)).alias("auction"),
                    F.pmod(F.xxhash64("id", F.lit(2)), F.lit(10_000)).alias("bidder")).cache())
    assert rows.count() == a.rows
    fields = ("price", "dateTime", "auction", "bidder")
    shapes = {
        "sort": lambda: rows.groupBy("w").agg(F.max(F.struct(*fields)).alias("b")),
        "hash": lambda: rows.groupBy("w").agg(*[F.max(f).alias(f) for f in fields]),
    }
    for side, df in shapes.items():
        plan = df()._jdf.queryExecution().executedPlan().toString()
        want = "SortAggregate" if side == "sort" else "HashAggregate"
        assert want in plan, f"{side}: expected {want} in the plan, got:\n{plan}"
    h = Harness("peers_probe_max_struct", "q7's aggregation: max(struct) (sort-based) vs four max(long) (hash)", {
        "input": f"{a.rows:,} rows of four longs, cached, 2 partitions, local[2], one group per 100,000 rows",
        "sort": "groupBy(w).agg(max(struct(price, dateTime, auction, bidder))): Spark's SortAggregate",
        "hash": "groupBy(w).agg(max(price), max(dateTime), max(auction), max(bidder)): Spark's HashAggregate",
        "runs": f"{a.warmups} warm-ups per side, then {a.repeats} repeats alternating",
    })

    def one(side: str, i: int) -> dict:
        s = timed(shapes[side]())
        return {"s": round(s, 3), "ns_per_row_core": round(s * 2 * 1e9 / a.rows, 1)}

    h.alternating(["sort", "hash"], a.repeats, one,
                  warmup=lambda side: [timed(shapes[side]()) for _ in range(a.warmups)])
    med = {side: sorted(r["s"] for r in h.runs[side])[len(h.runs[side]) // 2] for side in h.runs}
    saved = (med["sort"] - med["hash"]) * 2 * 1e9 / a.rows
    print(f"   medians: sort {med['sort']:.3f} s, hash {med['hash']:.3f} s; hash / sort {med['hash'] / med['sort']:.3f};"
          f" {saved:.0f} ns of core time per row saved (no target)")
    h.write(medians=med, saved_ns_per_row_core=round(saved, 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--probes", default=",".join(PROBES), help="comma-separated, of " + ",".join(PROBES))
    ap.add_argument("--events", type=int, default=2_000_000, help="decode: Nexmark events")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rows", type=int, default=6_000_000, help="max-struct: rows")
    ap.add_argument("--warmups", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=6, help="per side, alternating (even: each side first as often)")
    a = ap.parse_args()
    probes = a.probes.split(",")
    if unknown := [p for p in probes if p not in PROBES]:
        ap.error(f"--probes: unknown {','.join(unknown)} (known: {','.join(PROBES)})")
    if a.repeats < 2 or a.repeats % 2:
        ap.error(f"--repeats must be even and at least 2 (got {a.repeats}), so each side goes first equally often")

    SparkContext._ensure_initialized(conf=SparkConf().set("spark.jars", sluice.jar_path()))
    builder = (SparkSession.builder.master("local[2]").appName("sluice-bench-peers-probes")
               .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
               .config("spark.driver.memory", "4g").config("spark.sql.session.timeZone", "UTC")
               .config("spark.ui.showConsoleProgress", "false"))
    # sluice's session extensions, which carry the decoder; each decode run sets its side's decoder.
    spark = sluice.configure(builder, json_decoder="sluice").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory(prefix="sluice-bench-probes-") as work:
        if "decode" in probes:
            decode(spark, a, Path(work))
        if "max-struct" in probes:
            max_struct(spark, a)
    spark.stop()


if __name__ == "__main__":
    main()
