package sluice.suppress

import org.apache.spark.sql.DataFrame
import sluice.suppress.internal.SuppressPlanner

/**
 * `suppress` (KIP-328, KIP-539): holds back the updates of a streaming aggregation and emits, per
 * grouping key, the latest row when [[Suppressed]] says so. The result has the same columns as
 * `df`; the query must run in update output mode. Misuse fails here, with a message saying what
 * to do.
 */
object Suppress {
  def apply(df: DataFrame, suppressed: Suppressed): DataFrame = SuppressPlanner.build(df, suppressed, None)

  /** `timeCol` is the event-time column of `untilTimeLimit` (a timestamp column or e.g. "window.end"). */
  def apply(df: DataFrame, suppressed: Suppressed, timeCol: String): DataFrame =
    SuppressPlanner.build(df, suppressed, Option(timeCol))
}
