package sluice.spark

import org.apache.hadoop.conf.Configuration
import org.apache.spark.sql.execution.streaming.state.{
  KeyStateEncoderSpec, StateSchemaProvider, StateStoreConf,
  StateStoreId, StateStoreProvider
}
import org.apache.spark.sql.types.StructType

/**
 * Spark's `init` of a state store provider as `setUp`, its arguments one [[ProviderSpec]]. The same
 * on every supported minor, so written once here; each minor's `ProviderBase` extends it.
 */
trait ProviderInit extends StateStoreProvider {

  /** Sets the provider up for the store `spec` describes. */
  protected def setUp(spec: ProviderSpec): Unit

  override def init(
      stateStoreId: StateStoreId,
      keySchema: StructType,
      valueSchema: StructType,
      keyStateEncoderSpec: KeyStateEncoderSpec,
      useColumnFamilies: Boolean,
      storeConfs: StateStoreConf,
      hadoopConf: Configuration,
      useMultipleValuesPerKey: Boolean,
      stateSchemaProvider: Option[StateSchemaProvider]): Unit =
    setUp(ProviderSpec(stateStoreId, keySchema, valueSchema, keyStateEncoderSpec, useColumnFamilies, storeConfs,
        hadoopConf, useMultipleValuesPerKey, stateSchemaProvider))
}
