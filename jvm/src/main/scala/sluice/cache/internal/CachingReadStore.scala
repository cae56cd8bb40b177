package sluice.cache.internal

import org.apache.spark.sql.catalyst.expressions.UnsafeRow

import sluice.cache.CachingStateStoreProvider
import sluice.spark.ForwardingReadStore
import sluice.spark.StateStoreTypes.{
  KeyStateEncoderSpec, ReadStateStore, StateStoreId, StateStoreIterator,
  UnsafeRowPair
}

/**
 * A read-only store of `owner` at batch `version`: point reads through the slot cache `cache`,
 * scans of the delegate's store `inner` with the write-behind rows laid over them.
 */
private[sluice] final class CachingReadStore(owner: CachingStateStoreProvider, override val version: Long,
    val inner: ReadStateStore, cache: RecordCache)
  extends ForwardingReadStore {
  val counters = new StoreCounters // carried into the write store when upgraded
  // Clean entries only: a read store never holds a dirty entry, so nothing is ever written.
  private val noWrites: DirtyWriter = (k, _) =>
    throw new IllegalStateException(s"read-only store asked to write $k")
  private def writeBehind = owner.writeBehind

  override def id: StateStoreId = inner.id
  override def get(key: UnsafeRow, colFamilyName: String): UnsafeRow =
    owner.cachedGet(inner, cache, counters, key, colFamilyName, noWrites)
  override def valuesIterator(key: UnsafeRow, colFamilyName: String): Iterator[UnsafeRow] =
    inner.valuesIterator(key, colFamilyName)
  override def prefixScan(prefixKey: UnsafeRow, colFamilyName: String): StateStoreIterator[UnsafeRowPair] =
    if (writeBehind.rowsOf(colFamilyName).isEmpty) inner.prefixScan(prefixKey, colFamilyName)
    else writeBehind.overlay(inner.prefixScan(prefixKey, colFamilyName), colFamilyName,
      owner.families.prefixMatcher(prefixKey, colFamilyName))
  override def iterator(colFamilyName: String): StateStoreIterator[UnsafeRowPair] =
    writeBehind.overlay(inner.iterator(colFamilyName), colFamilyName, _ => true)
  override def abort(): Unit = inner.abort()
  override def release(): Unit = inner.release()

  // A read store holds no dirty row; rows of the write-behind log are not in the delegate, so a
  // read the cache does not serve is answered by the delegate only when none of them is of the family.
  override protected[sluice] def passThrough(colFamilyName: String): ReadStateStore =
    if (writeBehind.rowsOf(colFamilyName).isEmpty) inner
    else throw new UnsupportedOperationException(s"sluice write-behind cache: a multi-value or range read of " +
      s"column family '$colFamilyName' while rows written since the delegate's last commit are held in the " +
      "write-behind log; read this version after the next delegate commit")
  override protected[sluice] def registered(colFamilyName: String, keyStateEncoderSpec: KeyStateEncoderSpec,
      useMultipleValuesPerKey: Boolean): Unit = owner.families.learn(colFamilyName, keyStateEncoderSpec,
    useMultipleValuesPerKey)
}
