package sluice.spark

import org.apache.spark.sql.connector.catalog.Table
import org.apache.spark.sql.execution.SparkPlan
import org.apache.spark.sql.execution.streaming.runtime.{IncrementalExecution, MicroBatchExecution, StreamExecution}

/**
 * Spark's real-time mode as sluice needs it. spark-4.1, spark-4.2: no stateful real-time queries (they arrived
 * in 4.3; Spark refuses a stateful operator under the real-time trigger when the query starts), so
 * no plan sluice sees is a real-time one.
 */
object RealTimePlans {
  val supported: Boolean = false
  val AllowlistCheckKey: String = "spark.sql.streaming.realTimeMode.allowlistCheck"
  def isRealTime(exec: IncrementalExecution): Boolean = false
  def runsMicroBatches(stream: StreamExecution): Boolean = stream.isInstanceOf[MicroBatchExecution]
  def readsInRealTime(plan: SparkPlan): Boolean = false
  def checkAllowlist(plan: SparkPlan, elide: SparkPlan => Boolean, sink: Option[Table]): Unit = ()
  def aggregationByStreamTime(plan: SparkPlan, evictionMs: Option[Long]): SparkPlan = plan
}
