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
 * query's provider (see [[ProviderClass]] for why). Rows lie as [[EmitCacheLayout]]: the key is
 * the grouping key's bytes; the value is the latest output row's columns followed by
 * [[AddedColumns]].
 */
private[sluice] object EmitCacheStateLayout {

  /** The operator's name in Spark's state metadata. */
  val OperatorName = "emitCache"

  /** The state operator ids of emission caches (see `SluiceStatefulNode`). */
  val OperatorIds: NumericRange[Long] = SluiceConf.EmitCacheIds.from until SluiceConf.EmitCacheIds.until

  val StoreName: String = StateStoreId.DEFAULT_STORE_NAME

  /**
   * The emission cache keeps its rows in sluice's in-memory store whatever the query's provider:
   * its state is bounded by the cache's byte share, so memory is the right place, and that store
   * updates its one live map in place and writes only the batch's changes (one small delta file per
   * version). Spark's HDFS-backed store copies its map every version (spark-4.1: and writes each
   * delta through a checksum file manager that hands the bytes to another thread pool); that commit
   * would cost more than everything else the emission cache does (bench/cache/README.md). The store keys
   * are one binary column (see [[EmitCacheLayout]]), so the window store never treats a windowed
   * grouping key as a window to expire.
   */
  val ProviderClass: String = classOf[InMemoryWindowStoreProvider].getName

  /** The value's columns after the output row's: the batch time (ms) its key entered the cache, then its update
   *  sequence number. */
  val AddedColumns: Seq[String] = new EmitCacheLayout(new StructType(), new StructType()).valueSchema.fieldNames.toSeq
  val InsertTimeColumn: String = AddedColumns.head
}
