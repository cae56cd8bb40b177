package sluice.spark

import sluice.conf.SluiceConf

/**
 * Spark's state store SPI under the names feature code uses. Feature code imports these from here,
 * never from Spark's package: Spark has moved its streaming classes between packages before
 * (spark-4.1: `execution.streaming` was split into `runtime`, `checkpointing` and `operators.stateful`),
 * and a move is then one edit here (or in a per-minor folder), not one per feature.
 */
object StateStoreTypes {

  type StateStore = org.apache.spark.sql.execution.streaming.state.StateStore
  val StateStore = org.apache.spark.sql.execution.streaming.state.StateStore
  type ReadStateStore = org.apache.spark.sql.execution.streaming.state.ReadStateStore
  type StateStoreProvider = org.apache.spark.sql.execution.streaming.state.StateStoreProvider
  val StateStoreProvider = org.apache.spark.sql.execution.streaming.state.StateStoreProvider
  type StateStoreId = org.apache.spark.sql.execution.streaming.state.StateStoreId
  val StateStoreId = org.apache.spark.sql.execution.streaming.state.StateStoreId
  type StateStoreProviderId = org.apache.spark.sql.execution.streaming.state.StateStoreProviderId
  val StateStoreProviderId = org.apache.spark.sql.execution.streaming.state.StateStoreProviderId
  type StateStoreConf = org.apache.spark.sql.execution.streaming.state.StateStoreConf
  val StateStoreConf = org.apache.spark.sql.execution.streaming.state.StateStoreConf
  type StateStoreMetrics = org.apache.spark.sql.execution.streaming.state.StateStoreMetrics
  val StateStoreMetrics = org.apache.spark.sql.execution.streaming.state.StateStoreMetrics
  type StateStoreCheckpointInfo = org.apache.spark.sql.execution.streaming.state.StateStoreCheckpointInfo
  val StateStoreCheckpointInfo = org.apache.spark.sql.execution.streaming.state.StateStoreCheckpointInfo
  type StateStoreIterator[A] = org.apache.spark.sql.execution.streaming.state.StateStoreIterator[A]
  type StateSchemaProvider = org.apache.spark.sql.execution.streaming.state.StateSchemaProvider
  type UnsafeRowPair = org.apache.spark.sql.execution.streaming.state.UnsafeRowPair
  type StateStoreErrors = org.apache.spark.sql.execution.streaming.state.StateStoreErrors.type
  val StateStoreErrors = org.apache.spark.sql.execution.streaming.state.StateStoreErrors

  type StateSchemaValidationResult = org.apache.spark.sql.execution.streaming.state.StateSchemaValidationResult

  type KeyStateEncoderSpec = org.apache.spark.sql.execution.streaming.state.KeyStateEncoderSpec
  type NoPrefixKeyStateEncoderSpec = org.apache.spark.sql.execution.streaming.state.NoPrefixKeyStateEncoderSpec
  val NoPrefixKeyStateEncoderSpec = org.apache.spark.sql.execution.streaming.state.NoPrefixKeyStateEncoderSpec
  type PrefixKeyScanStateEncoderSpec = org.apache.spark.sql.execution.streaming.state.PrefixKeyScanStateEncoderSpec
  val PrefixKeyScanStateEncoderSpec = org.apache.spark.sql.execution.streaming.state.PrefixKeyScanStateEncoderSpec

  type StateStoreCustomMetric = org.apache.spark.sql.execution.streaming.state.StateStoreCustomMetric
  type StateStoreCustomSumMetric = org.apache.spark.sql.execution.streaming.state.StateStoreCustomSumMetric
  val StateStoreCustomSumMetric = org.apache.spark.sql.execution.streaming.state.StateStoreCustomSumMetric
  type StateStoreCustomSizeMetric = org.apache.spark.sql.execution.streaming.state.StateStoreCustomSizeMetric
  // spark-4.3: the factory gained a third parameter (with a default), so calls stay the same source.
  val StateStoreCustomSizeMetric = org.apache.spark.sql.execution.streaming.state.StateStoreCustomSizeMetric
  type SupportsFineGrainedReplay = org.apache.spark.sql.execution.streaming.state.SupportsFineGrainedReplay
  type StateStoreInstanceMetric = org.apache.spark.sql.execution.streaming.state.StateStoreInstanceMetric

  val StateStoreThreadLocalTracker = org.apache.spark.sql.execution.streaming.state.StateStoreThreadLocalTracker

  /** Spark's own providers, by class name (the classes are `private[sql]`). */
  val HdfsProviderClass: String = SluiceConf.ProviderClasses("hdfs")
  val RocksDBProviderClass: String = SluiceConf.ProviderClasses("rocksdb")
}
