package sluice.cache.internal

import scala.collection.immutable.NumericRange

import org.apache.spark.sql.types.StructType

import sluice.conf.SluiceConf
import sluice.spark.StateStoreTypes.StateStoreId
import sluice.windowstore.InMemoryWindowStoreProvider

/**
 * Where an emission cache keeps its state in a checkpoint and how the rows lie there, for readers
 * of a checkpoint (`sluice.inspect`). The operator plans with these values, so a reader that asks
 * here reads what the operator wrote.
 *
 * Its one store is the operator's default store, opened with [[ProviderClass]] whatever the
 * query's provider (see `EmitCacheExec.storeConf` for why). Rows lie as [[EmitLayout]]: the key is
 * the grouping key's bytes; the value is the latest output row's columns followed by
 * [[AddedColumns]].
 */
private[sluice] object EmitCacheStateLayout {
  /** The operator's name in Spark's state metadata. */
  val OperatorName = "emitCache"

  /** The state operator ids of emission caches (see `SluiceStatefulNode`). */
  val OperatorIds: NumericRange[Long] = SluiceConf.EmitCacheIds.from until SluiceConf.EmitCacheIds.until

  val StoreName: String = StateStoreId.DEFAULT_STORE_NAME
  val ProviderClass: String = classOf[InMemoryWindowStoreProvider].getName

  /** The value's columns after the output row's: the batch time (ms) its key entered the cache, then its update
   *  sequence number. */
  val AddedColumns: Seq[String] = new EmitLayout(new StructType(), new StructType()).valueSchema.fieldNames.toSeq
  val InsertTimeColumn: String = AddedColumns.head
}
