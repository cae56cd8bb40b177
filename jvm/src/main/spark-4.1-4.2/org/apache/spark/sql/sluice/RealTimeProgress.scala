package org.apache.spark.sql.sluice

import org.apache.spark.sql.catalyst.expressions.Attribute
import org.apache.spark.sql.execution.SparkPlan

/**
 * Progress rows in Spark's real-time aggregation under suppress: spark-4.1, spark-4.2 run no stateful
 * real-time query (Spark 4.3 does; see spark-4.3's object of this name), so there is nothing to install.
 */
object RealTimeProgress {
  def install(plan: SparkPlan, window: Option[Attribute], streamTime: Option[Attribute], graceMs: Long): SparkPlan =
    plan
  def isProgressNode(p: SparkPlan): Boolean = false
}
