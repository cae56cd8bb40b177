package sluice.spark

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state.{
  KeyStateEncoderSpec, ReadStateStore, StateStore, StateStoreErrors,
  StateStoreIterator, UnsafeRowPair
}

/**
 * The parts of Spark's store traits that differ between minors, so that sluice's stores implement
 * one fixed set of members on every Spark.
 *
 * spark-4.2 and later (what only a later minor adds is in its `ColumnFamilyRegistration`):
 * `ReadStateStore` adds multi-value and range scans and `allColumnFamilyNames`;
 * `StateStore` adds `deleteRange`; `multiGet` (unsupported unless a store
 * implements it) is answered key by key.
 */

/**
 * A store wrapping another (the record cache): what it does not serve itself is answered by the
 * wrapped store that `passThrough` returns.
 */
trait ForwardingReadStore extends ReadStateStore with ColumnFamilyRegistration {

  /**
   * The wrapped store, ready to answer a read of `colFamilyName` that this store does not serve:
   * every write made through this store so far must be visible in it.
   */
  protected[sluice] def passThrough(colFamilyName: String): ReadStateStore

  /** A column family was registered on the wrapped store (spark-4.3 and later: `registerColFamily`). */
  protected[sluice] def registered(colFamilyName: String, keyStateEncoderSpec: KeyStateEncoderSpec,
      useMultipleValuesPerKey: Boolean): Unit

  override def allColumnFamilyNames: Set[String] = passThrough(StateStore.DEFAULT_COL_FAMILY_NAME).allColumnFamilyNames
  // Key by key through this store's own get (the cache serves what it holds), as Spark's HDFS-backed store does.
  override def multiGet(keys: Array[UnsafeRow], colFamilyName: String): Iterator[UnsafeRow] =
    keys.iterator.map(get(_, colFamilyName))
  override def iteratorWithMultiValues(colFamilyName: String): StateStoreIterator[UnsafeRowPair] =
    passThrough(colFamilyName).iteratorWithMultiValues(colFamilyName)
  override def prefixScanWithMultiValues(prefixKey: UnsafeRow, colFamilyName: String)
      : StateStoreIterator[UnsafeRowPair] =
    passThrough(colFamilyName).prefixScanWithMultiValues(prefixKey, colFamilyName)
  override def rangeScan(startKey: Option[UnsafeRow], endKey: Option[UnsafeRow], colFamilyName: String)
      : StateStoreIterator[UnsafeRowPair] =
    passThrough(colFamilyName).rangeScan(startKey, endKey, colFamilyName)
  override def rangeScanWithMultiValues(startKey: Option[UnsafeRow], endKey: Option[UnsafeRow],
      colFamilyName: String): StateStoreIterator[UnsafeRowPair] =
    passThrough(colFamilyName).rangeScanWithMultiValues(startKey, endKey, colFamilyName)
}

/** The writable form of [[ForwardingReadStore]]. */
trait ForwardingStore extends StateStore with ForwardingReadStore {

  /**
   * The wrapped writable store, ready for a write this store does not serve (a range delete) on
   * `colFamilyName`: nothing this store still holds of that family may be read afterwards.
   */
  protected def passThroughWrite(colFamilyName: String): StateStore

  override def deleteRange(beginKey: UnsafeRow, endKey: UnsafeRow, colFamilyName: String): Unit =
    passThroughWrite(colFamilyName).deleteRange(beginKey, endKey, colFamilyName)
}

/** A store with one column family of one value per key (the window store). */
trait SingleFamilyReadStore extends ReadStateStore {

  /** The provider's name in Spark's unsupported-operation errors. */
  protected def providerName: String

  override def allColumnFamilyNames: Set[String] = Set(StateStore.DEFAULT_COL_FAMILY_NAME)
  override def multiGet(keys: Array[UnsafeRow], colFamilyName: String): Iterator[UnsafeRow] =
    keys.iterator.map(get(_, colFamilyName))
  override def iteratorWithMultiValues(colFamilyName: String): StateStoreIterator[UnsafeRowPair] =
    throw StateStoreErrors.unsupportedOperationException("iteratorWithMultiValues", providerName)
  override def prefixScanWithMultiValues(prefixKey: UnsafeRow, colFamilyName: String)
      : StateStoreIterator[UnsafeRowPair] =
    throw StateStoreErrors.unsupportedOperationException("prefixScanWithMultiValues", providerName)
}
