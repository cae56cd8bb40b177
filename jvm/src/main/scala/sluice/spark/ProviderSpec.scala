package sluice.spark

import org.apache.hadoop.conf.Configuration
import org.apache.spark.sql.execution.streaming.state.{
  KeyStateEncoderSpec, StateSchemaProvider, StateStoreConf,
  StateStoreId, StateStoreProvider
}
import org.apache.spark.sql.types.StructType

/**
 * What Spark tells a state store provider when it sets one up (the arguments of its `init`): the
 * store, its schemas and key encoding, whether it has column families and several values per key,
 * and its settings.
 */
final case class ProviderSpec(
    stateStoreId: StateStoreId,
    keySchema: StructType,
    valueSchema: StructType,
    keyStateEncoderSpec: KeyStateEncoderSpec,
    useColumnFamilies: Boolean,
    storeConf: StateStoreConf,
    hadoopConf: Configuration,
    useMultipleValuesPerKey: Boolean,
    stateSchemaProvider: Option[StateSchemaProvider]) {

  /** Sets `provider` up for the same store (a provider sluice creates itself, e.g. a delegate). */
  def init(provider: StateStoreProvider): Unit =
    provider.init(stateStoreId, keySchema, valueSchema, keyStateEncoderSpec, useColumnFamilies, storeConf, hadoopConf,
      useMultipleValuesPerKey, stateSchemaProvider)
}
