package sluice.suppress.internal

import org.apache.spark.sql.{AnalysisException, SparkSession}
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.catalyst.streaming.WriteToStream
import org.apache.spark.sql.streaming.OutputMode

/** Where suppress fits a query: the output-mode and placement checks the strategy and the extensions apply, with their messages. */
private[sluice] object SuppressChecks {
  def outputModeError(mode: String): AnalysisException = new AnalysisException(
    s"suppress needs the query's output mode to be update, but it is $mode: start the query with " +
      "writeStream.outputMode(\"update\"). (Suppress itself turns an update-mode aggregation into final " +
      "or rate-limited results.)",
    None, None, None, None, Map.empty[String, String], Array.empty)

  def requireUpdateMode(mode: String): Unit =
    if (!mode.equalsIgnoreCase("update")) throw outputModeError(mode)

  /** Check rule: a streaming write of a plan with suppress must use update mode (fails `start()`). */
  def checkRule(session: SparkSession): LogicalPlan => Unit = plan =>
    plan.foreach {
      case w: WriteToStream
          if w.outputMode != OutputMode.Update() &&
          w.inputQuery.exists(_.isInstanceOf[SuppressNode]) =>
        throw outputModeError(w.outputMode.toString)
      case _ =>
    }
}
