"""Every pyspark and py4j handle sluice reaches into, and the differences between pyspark versions.

pyspark's private attributes (``_jdf``, ``_jsparkSession``, ``_plan``, ``_options``, a context's
``_jvm``) and its Connect classes change between Spark releases; sluice's other modules ask here.
"""

from __future__ import annotations

import sys
from typing import Any

from sluice._errors import SluiceError


def pyspark_version() -> str:
    """The installed pyspark's version (the Spark a classic or local Connect session runs)."""
    from pyspark.version import __version__

    return __version__


def is_connect_dataframe(df: Any) -> bool:
    """Whether ``df`` is a Spark Connect DataFrame (checked without importing the Connect client:
    if it is not loaded, no Connect DataFrame exists)."""
    module = sys.modules.get("pyspark.sql.connect.dataframe")
    return module is not None and isinstance(df, module.DataFrame)


def is_connect_session(spark: Any) -> bool:
    module = sys.modules.get("pyspark.sql.connect.session")
    return module is not None and isinstance(spark, module.SparkSession)


def jvm(spark: Any) -> Any:
    """The py4j view of the session's JVM."""
    if is_connect_session(spark):
        raise SluiceError(
            "this needs a classic SparkSession: a Spark Connect client has no JVM to call (sluice's "
            "conf keys, suppress and the query metrics work over Connect)"
        )
    return spark.sparkContext._jvm


def jdf(df: Any) -> Any:
    """The JVM Dataset behind a classic DataFrame."""
    return df._jdf


def jsession(spark: Any) -> Any:
    """The JVM SparkSession behind a classic session."""
    return spark._jsparkSession


def dataframe(java_df: Any, spark: Any) -> Any:
    """A classic DataFrame over a JVM Dataset."""
    from pyspark.sql import DataFrame

    return DataFrame(java_df, spark)


def show_string(df: Any, n: int) -> str:
    """What ``df.show(n, truncate=False)`` prints."""
    return str(df._jdf.showString(n, 0, False))


def builder_options(builder: Any) -> dict[str, Any]:
    """The settings a SparkSession builder holds so far."""
    return getattr(builder, "_options", {})


def connect_plan(df: Any) -> Any:
    """The logical plan of a Connect DataFrame."""
    return df._plan


def connect_dataframe(plan: Any, spark: Any) -> Any:
    """A Connect DataFrame over a logical plan."""
    from pyspark.sql.connect.dataframe import DataFrame

    return DataFrame(plan, spark)


def connect_logical_plan_class() -> type:
    """pyspark's Connect LogicalPlan, the base of sluice's own plan node."""
    from pyspark.sql.connect.plan import LogicalPlan

    return LogicalPlan
