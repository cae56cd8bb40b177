package org.apache.spark.sql.sluice

import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.classic.{Dataset => ClassicDataset, SparkSession => ClassicSparkSession}

import sluice.suppress.Suppressed

/**
 * `suppress` of a logical plan, for callers that hold a plan instead of a DataFrame (the Spark
 * Connect relation plugin gets its input as a plan from the Connect planner). Builds the plan
 * with [[SuppressPlanner.build]], so checks and messages are those of the DataFrame API.
 */
object SuppressOfPlan {
  def apply(session: ClassicSparkSession, child: LogicalPlan, suppressed: Suppressed,
      timeCol: Option[String]): LogicalPlan =
    SuppressPlanner.build(ClassicDataset.ofRows(session, child), suppressed, timeCol)
      .queryExecution.analyzed
}
