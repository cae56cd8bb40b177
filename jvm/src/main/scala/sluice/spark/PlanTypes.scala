package sluice.spark

/**
 * Spark's physical planning and stateful operator classes under the names feature code uses (why
 * aliases: see [[StateStoreTypes]]). Plan nodes are built and copied by [[SparkNodes]], never here.
 */
object PlanTypes {
  type SparkPlan = org.apache.spark.sql.execution.SparkPlan
  type SparkStrategy = org.apache.spark.sql.execution.SparkStrategy
  type UnaryExecNode = org.apache.spark.sql.execution.UnaryExecNode
  type ProjectExec = org.apache.spark.sql.execution.ProjectExec
  type ColumnarRule = org.apache.spark.sql.execution.ColumnarRule
  type SQLMetric = org.apache.spark.sql.execution.metric.SQLMetric
  val SQLMetrics = org.apache.spark.sql.execution.metric.SQLMetrics

  /** spark-4.3: a fifth field with a default. */
  type ShuffleExchangeExec = org.apache.spark.sql.execution.exchange.ShuffleExchangeExec

  type StateStoreRestoreExec = org.apache.spark.sql.execution.streaming.operators.stateful.StateStoreRestoreExec
  type StateStoreSaveExec = org.apache.spark.sql.execution.streaming.operators.stateful.StateStoreSaveExec
  type SessionWindowStateStoreRestoreExec =
    org.apache.spark.sql.execution.streaming.operators.stateful.SessionWindowStateStoreRestoreExec
  type SessionWindowStateStoreSaveExec =
    org.apache.spark.sql.execution.streaming.operators.stateful.SessionWindowStateStoreSaveExec
  type StreamingSessionWindowStateManager =
    org.apache.spark.sql.execution.streaming.operators.stateful.StreamingSessionWindowStateManager
  val StreamingSessionWindowStateManager =
    org.apache.spark.sql.execution.streaming.operators.stateful.StreamingSessionWindowStateManager

  /** Spark's aggregation operators (hash, object-hash and sort). */
  type BaseAggregateExec = org.apache.spark.sql.execution.aggregate.BaseAggregateExec

  /** Spark's planning of a streaming aggregation (`planStreamingAggregationForSession`). */
  val AggUtils = org.apache.spark.sql.execution.aggregate.AggUtils

  type StatefulOperatorStateInfo = org.apache.spark.sql.execution.streaming.operators.stateful.StatefulOperatorStateInfo
  val StatefulOperatorStateInfo = org.apache.spark.sql.execution.streaming.operators.stateful.StatefulOperatorStateInfo
  type StatefulOperatorCustomMetric =
    org.apache.spark.sql.execution.streaming.operators.stateful.StatefulOperatorCustomMetric
  type StatefulOperatorCustomSumMetric =
    org.apache.spark.sql.execution.streaming.operators.stateful.StatefulOperatorCustomSumMetric
  object StatefulOperatorCustomSumMetric {
    def apply(name: String, desc: String): StatefulOperatorCustomSumMetric =
      org.apache.spark.sql.execution.streaming.operators.stateful.StatefulOperatorCustomSumMetric(name, desc)
  }

  type WriteToMicroBatchDataSource = org.apache.spark.sql.execution.streaming.sources.WriteToMicroBatchDataSource
  val WriteToMicroBatchDataSource = org.apache.spark.sql.execution.streaming.sources.WriteToMicroBatchDataSource
  type WriteToMicroBatchDataSourceV1 = org.apache.spark.sql.execution.streaming.sources.WriteToMicroBatchDataSourceV1
  val WriteToMicroBatchDataSourceV1 = org.apache.spark.sql.execution.streaming.sources.WriteToMicroBatchDataSourceV1
}
