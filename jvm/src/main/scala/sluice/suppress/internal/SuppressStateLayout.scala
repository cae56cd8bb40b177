package sluice.suppress.internal

import scala.collection.immutable.NumericRange

import org.apache.spark.sql.types.StructType

import sluice.conf.SluiceConf
import sluice.spark.StateStoreTypes.RocksDBProviderClass
import sluice.suppress.BufferFullStrategy

/**
 * Where a suppress operator keeps its state in a checkpoint and how the rows lie there, for readers
 * of a checkpoint (`sluice.inspect`). The operator plans with these values, so a reader that asks
 * here reads what the operator wrote.
 *
 * The buffer's in-memory part is the operator's default store (the query's provider); with
 * spill-to-disk, its disk part is the store [[SpillStoreName]] beside it ([[SpillProviderClass]]
 * whatever the query's provider, and only in partitions that spilled). Both lay rows out as
 * [[BufferLayout]]: the key column holds the suppression key as a struct, null in the one row per
 * partition that holds the operator's metadata (the partition's stream time, as its buffer time);
 * the value holds the buffer time (ms) and the latest row.
 */
private[sluice] object SuppressStateLayout {

  /** The operator's name in Spark's state metadata. */
  val OperatorName = "suppress"

  /** The state operator ids of suppress operators (see `SluiceStatefulNode`). */
  val OperatorIds: NumericRange[Long] = SluiceConf.SuppressIds.from until SluiceConf.SuppressIds.until

  /** The spill store's name beside the operator's own store (in its state directory). */
  val SpillStoreName: String = "suppressSpill"
  val SpillProviderClass: String = RocksDBProviderClass

  /** The sidecar's `whenFull` of the buffers that spill (the operators that have a spill store). */
  val SpillWhenFull: String = SuppressStrategy.whenFull(BufferFullStrategy.SpillToDisk)

  private val rows = new BufferLayout(new StructType(), new StructType())

  /** The key's struct column, null in the metadata row. */
  val KeyColumn: String = rows.keySchema.fieldNames(0)

  /** The value's buffer time (ms) and latest-row columns. */
  val BufferTimeColumn: String = rows.valueSchema.fieldNames(0)
  val RowColumn: String = rows.valueSchema.fieldNames(1)
}
