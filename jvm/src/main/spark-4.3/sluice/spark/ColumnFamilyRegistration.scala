package sluice.spark

import org.apache.spark.sql.execution.streaming.state.{KeyStateEncoderSpec, ReadStateStore}
import org.apache.spark.sql.types.StructType

/**
 * spark-4.3: `ReadStateStore.registerColFamily`, a read store learning a column family: the wrapped
 * store learns it, and so does the wrapper ([[ForwardingReadStore.registered]]).
 */
private[spark] trait ColumnFamilyRegistration extends ReadStateStore { self: ForwardingReadStore =>
  override def registerColFamily(colFamilyName: String, keySchema: StructType, valueSchema: StructType,
      keyStateEncoderSpec: KeyStateEncoderSpec, useMultipleValuesPerKey: Boolean, isInternal: Boolean): Unit = {
    passThrough(colFamilyName).registerColFamily(colFamilyName, keySchema, valueSchema, keyStateEncoderSpec,
      useMultipleValuesPerKey, isInternal)
    registered(colFamilyName, keyStateEncoderSpec, useMultipleValuesPerKey)
  }
}
