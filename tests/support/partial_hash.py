"""Partial aggregation by hash's query (spark.sluice.aggregate.partial.hash), shared by its tests and
those of both rewrites together: max of a struct per tumbling window, whose buffer Spark's hash
aggregation cannot hold, and the map side's partial aggregation in a plan."""
from __future__ import annotations

import re

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from support.slicing import DELAY

KEY = "spark.sluice.aggregate.partial.hash"


def aggregates(df: DataFrame, window: Column) -> DataFrame:
    return (df.withWatermark("ts", f"{DELAY} seconds").groupBy(window, "user")
            .agg(F.count("*").alias("n"), F.sum("v").alias("total"), F.max(F.struct("v", "ts")).alias("m")))


def rows(df: DataFrame) -> DataFrame:
    """The columns Run's sink reads: the largest value taken out of the struct."""
    return df.select("window", "user", "n", "total", F.col("m.v").alias("top"))


def map_side(plan: str) -> str:
    """The map side's partial aggregation: `hash` (object-hash) or `sort` (a sort aggregation)."""
    below = plan.split("Exchange", 1)[1]
    found = re.search(r"(ObjectHashAggregate|SortAggregate)\(keys?=\[[^\]]*\], functions=\[partial_", below)
    assert found, below
    return "hash" if found.group(1) == "ObjectHashAggregate" else "sort"
