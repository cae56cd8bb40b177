package sluice.spark

import sluice.conf.SluiceConf

/**
 * Spark's state store SPI under the names feature code uses. Feature code imports these from here,
 * never from Spark's package: Spark has moved its streaming classes between packages before
 * (spark-4.1: `execution.streaming` was split into `runtime`, `checkpointing` and `operators.stateful`),
 * and a move is then one edit here (or in a per-minor folder), not one per feature.
 *
 * What feature code constructs is built here, by an object of the class's name whose `apply` calls
 * Spark's constructor (never Spark's companion itself): a parameter Spark adds, removes or reorders
 * in a minor is then met here only (ARCHITECTURE.md, "What feature code builds of Spark's").
 */
object StateStoreTypes {

  type StateStore = org.apache.spark.sql.execution.streaming.state.StateStore
  val StateStore = org.apache.spark.sql.execution.streaming.state.StateStore
  type ReadStateStore = org.apache.spark.sql.execution.streaming.state.ReadStateStore
  type StateStoreProvider = org.apache.spark.sql.execution.streaming.state.StateStoreProvider
  val StateStoreProvider = org.apache.spark.sql.execution.streaming.state.StateStoreProvider
  type StateStoreId = org.apache.spark.sql.execution.streaming.state.StateStoreId
  object StateStoreId {
    val DEFAULT_STORE_NAME: String = org.apache.spark.sql.execution.streaming.state.StateStoreId.DEFAULT_STORE_NAME
    def apply(checkpointRootLocation: String, operatorId: Long, partitionId: Int,
        storeName: String = DEFAULT_STORE_NAME): StateStoreId =
      org.apache.spark.sql.execution.streaming.state.StateStoreId(checkpointRootLocation, operatorId, partitionId,
        storeName)
  }
  type StateStoreProviderId = org.apache.spark.sql.execution.streaming.state.StateStoreProviderId
  object StateStoreProviderId {
    def apply(storeId: StateStoreId, queryRunId: java.util.UUID): StateStoreProviderId =
      org.apache.spark.sql.execution.streaming.state.StateStoreProviderId(storeId, queryRunId)
  }
  type StateStoreConf = org.apache.spark.sql.execution.streaming.state.StateStoreConf
  val StateStoreConf = org.apache.spark.sql.execution.streaming.state.StateStoreConf
  type StateStoreMetrics = org.apache.spark.sql.execution.streaming.state.StateStoreMetrics
  object StateStoreMetrics {
    def apply(numKeys: Long, memoryUsedBytes: Long, customMetrics: Map[StateStoreCustomMetric, Long])
        : StateStoreMetrics =
      org.apache.spark.sql.execution.streaming.state.StateStoreMetrics(numKeys, memoryUsedBytes, customMetrics)
  }
  type StateStoreCheckpointInfo = org.apache.spark.sql.execution.streaming.state.StateStoreCheckpointInfo
  object StateStoreCheckpointInfo {
    def apply(partitionId: Int, batchVersion: Long, stateStoreCkptId: Option[String],
        baseStateStoreCkptId: Option[String]): StateStoreCheckpointInfo =
      org.apache.spark.sql.execution.streaming.state.StateStoreCheckpointInfo(partitionId, batchVersion,
        stateStoreCkptId, baseStateStoreCkptId)
  }
  type StateStoreIterator[A] = org.apache.spark.sql.execution.streaming.state.StateStoreIterator[A]
  object StateStoreIterator {
    def apply[A](iter: Iterator[A], onClose: () => Unit = () => ()): StateStoreIterator[A] =
      new org.apache.spark.sql.execution.streaming.state.StateStoreIterator(iter, onClose)
  }
  type StateSchemaProvider = org.apache.spark.sql.execution.streaming.state.StateSchemaProvider
  type UnsafeRowPair = org.apache.spark.sql.execution.streaming.state.UnsafeRowPair
  object UnsafeRowPair {
    def apply(): UnsafeRowPair = new org.apache.spark.sql.execution.streaming.state.UnsafeRowPair()
  }
  type StateStoreErrors = org.apache.spark.sql.execution.streaming.state.StateStoreErrors.type
  val StateStoreErrors = org.apache.spark.sql.execution.streaming.state.StateStoreErrors

  type StateSchemaValidationResult = org.apache.spark.sql.execution.streaming.state.StateSchemaValidationResult

  type KeyStateEncoderSpec = org.apache.spark.sql.execution.streaming.state.KeyStateEncoderSpec
  type NoPrefixKeyStateEncoderSpec = org.apache.spark.sql.execution.streaming.state.NoPrefixKeyStateEncoderSpec
  object NoPrefixKeyStateEncoderSpec {
    def apply(keySchema: org.apache.spark.sql.types.StructType): NoPrefixKeyStateEncoderSpec =
      org.apache.spark.sql.execution.streaming.state.NoPrefixKeyStateEncoderSpec(keySchema)
    def unapply(spec: NoPrefixKeyStateEncoderSpec): Some[org.apache.spark.sql.types.StructType] = Some(spec.keySchema)
  }
  type PrefixKeyScanStateEncoderSpec = org.apache.spark.sql.execution.streaming.state.PrefixKeyScanStateEncoderSpec
  val PrefixKeyScanStateEncoderSpec = org.apache.spark.sql.execution.streaming.state.PrefixKeyScanStateEncoderSpec

  type StateStoreCustomMetric = org.apache.spark.sql.execution.streaming.state.StateStoreCustomMetric
  type StateStoreCustomSumMetric = org.apache.spark.sql.execution.streaming.state.StateStoreCustomSumMetric
  object StateStoreCustomSumMetric {
    def apply(name: String, desc: String): StateStoreCustomSumMetric =
      org.apache.spark.sql.execution.streaming.state.StateStoreCustomSumMetric(name, desc)
  }
  type StateStoreCustomSizeMetric = org.apache.spark.sql.execution.streaming.state.StateStoreCustomSizeMetric
  object StateStoreCustomSizeMetric {
    // spark-4.3: a third parameter, with a default.
    def apply(name: String, desc: String): StateStoreCustomSizeMetric =
      org.apache.spark.sql.execution.streaming.state.StateStoreCustomSizeMetric(name, desc)
  }
  type SupportsFineGrainedReplay = org.apache.spark.sql.execution.streaming.state.SupportsFineGrainedReplay
  type StateStoreInstanceMetric = org.apache.spark.sql.execution.streaming.state.StateStoreInstanceMetric

  val StateStoreThreadLocalTracker = org.apache.spark.sql.execution.streaming.state.StateStoreThreadLocalTracker

  /** Spark's own providers, by class name (the classes are `private[sql]`). */
  val HdfsProviderClass: String = SluiceConf.ProviderClasses("hdfs")
  val RocksDBProviderClass: String = SluiceConf.ProviderClasses("rocksdb")
}
