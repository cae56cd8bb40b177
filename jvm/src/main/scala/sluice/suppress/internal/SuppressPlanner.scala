package sluice.suppress.internal

import org.apache.spark.sql.{DataFrame, SparkSession}
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.sluice.{BatchFiles, DatasetAccess}
import org.apache.spark.sql.types.{TimestampNTZType, TimestampType}

import sluice.state.GroupingColumns
import sluice.suppress._

private[sluice] object SuppressPlanner {
  private def fail(msg: String): Nothing = throw new SuppressUsageException(msg)

  /** Builds `suppress(df)`, checking every misuse that the plan reveals. */
  def build(df: DataFrame, suppressed: Suppressed, timeCol: Option[String]): DataFrame = {
    val plan = df.queryExecution.analyzed
    if (!plan.isStreaming) {
      fail("suppress needs a streaming DataFrame (from spark.readStream); for a batch DataFrame the " +
        "aggregation result is already final.")
    }
    val agg = findAggregate(plan).getOrElse(fail(
        "suppress needs the result of a streaming aggregation, e.g. df.groupBy(F.window(\"ts\", \"1 hour\"), " +
          "\"user\").count(); apply suppress directly to that result."))
    // In grouping order, so that the aggregation's hash partitioning already satisfies suppress (no
    // extra shuffle).
    val keys = GroupingColumns.inGroupingOrder(agg)
    val missing = keys.filterNot(k => plan.output.exists(_.exprId == k.exprId))
    if (missing.nonEmpty) {
      fail(s"suppress needs the aggregation's grouping columns in its input; " +
        s"${missing.map(_.name).mkString(", ")} were dropped: keep them in the DataFrame.")
    }
    // A session window counts as a window: its end is the session's (sluice.sessions runs the
    // aggregation in update mode, retracting merged-away sessions).
    val window = keys.find(k => k.metadata.contains(TimeWindow.marker) || k.metadata.contains(SessionWindow.marker))
    var graceMs = 0L
    var earlyMs = 0L
    suppressed match {
      case u: UntilWindowCloses =>
        val w = window.getOrElse(fail("suppress(until_window_closes) needs a time window among the grouping " +
            "columns: group by F.window(<event-time column>, <duration>) or F.session_window(<event-time column>, " +
            "<gap>) (and other keys) before suppress."))
        if (!w.metadata.contains(EventTimeWatermark.delayKey)) {
          fail("suppress(until_window_closes) needs a watermark on the window's event-time column: call " +
            "df.withWatermark(\"<event-time column>\", \"<grace period>\") before the aggregation; the watermark " +
            "delay is the grace period.")
        }
        val delayMs = w.metadata.getLong(EventTimeWatermark.delayKey)
        graceMs = u.graceMs.getOrElse(delayMs)
        if (graceMs > delayMs) {
          fail(s"suppress(until_window_closes) has a grace period of ${graceMs}ms, more than the watermark delay of " +
            s"${delayMs}ms on the window's event-time column: Spark drops a window's state once the watermark " +
            "passes its end, so no window can accept rows longer than the delay. Use a grace of at most " +
            s"${delayMs}ms, or a watermark delay of at least ${graceMs}ms (df.withWatermark(\"<event-time column>\", " +
            "\"<delay>\")).")
        }
        earlyMs = delayMs - graceMs
        u.lateRecords.foreach(checkLateRecords(df.sparkSession, _, agg))
      case _ =>
    }
    val time = (suppressed, timeCol) match {
      case (_: UntilTimeLimit, None) =>
        fail("suppress(until_time_limit) needs time_col: the timestamp column whose value is a row's event time " +
          "(e.g. F.max(\"ts\").alias(\"ts\") in the aggregation, or \"window.end\").")
      case (_: UntilTimeLimit, Some(name)) =>
        val e = DatasetAccess.resolve(df, name).getOrElse(
          fail(
            s"time_col '$name' is not a column of the DataFrame; columns: ${plan.output.map(_.name).mkString(", ")}"))
        if (e.dataType != TimestampType && e.dataType != TimestampNTZType) {
          fail(s"time_col '$name' must be a timestamp column, but it is ${e.dataType.simpleString}.")
        }
        Some(e match { case Alias(child, _) => child; case other => other })
      case (_, Some(name)) =>
        fail(s"time_col ('$name') is only used by until_time_limit; ${suppressed.describe} takes its time from " +
          "the window end or the wall clock.")
      case _ => None
    }
    DatasetAccess.ofRows(df.sparkSession,
      SuppressNode(suppressed, keys, window, graceMs, time, plan,
        earlyMs = earlyMs))
  }

  /**
   * [[build]] for callers that hold a plan instead of a DataFrame (the Spark Connect relation
   * plugin gets its input as a plan), with the same checks and messages; the analyzed plan.
   */
  def ofPlan(session: SparkSession, child: LogicalPlan, suppressed: Suppressed, timeCol: Option[String]): LogicalPlan =
    build(DatasetAccess.ofRows(session, child), suppressed, timeCol).queryExecution.analyzed

  /** Fails unless `late` can be written for `agg`'s input records. */
  private def checkLateRecords(session: SparkSession, late: LateRecords, agg: Aggregate): Unit = {
    val taken = agg.child.output.map(_.name).filter(n =>
      n.equalsIgnoreCase(LateRecords.LateByColumn) || n.equalsIgnoreCase(LateRecords.BatchColumn))
    if (taken.nonEmpty) {
      fail(s"the aggregation's input has a column named ${taken.mkString(", ")}, which late records add " +
        s"(${LateRecords.LateByColumn}, and ${LateRecords.BatchColumn} as the directory of each batch); rename it.")
    }
    val format = BatchFiles.fileFormat(session, late.format).fold(
      why => fail(s"late records are written with a Spark file format (parquet, json, orc or csv): $why."), identity)
    BatchFiles.unsupportedField(format, LateRecordsExec.schema(agg.child.output)).foreach { case (name, t) =>
      fail(s"late records in format '${late.format}' cannot hold column $name (${t.simpleString}); use parquet, " +
        "json or orc.")
    }
  }

  /** The aggregation whose result `plan` is, looking through aliases and column-keeping projections. */
  private def findAggregate(plan: LogicalPlan): Option[Aggregate] = plan match {
    case a: Aggregate => Some(a)
    case s: SubqueryAlias => findAggregate(s.child)
    case p: Project if p.projectList.forall(_.isInstanceOf[Attribute]) => findAggregate(p.child)
    case s: SuppressNode => findAggregate(s.child) // suppress of a suppressed aggregation
    case _ => None
  }
}
