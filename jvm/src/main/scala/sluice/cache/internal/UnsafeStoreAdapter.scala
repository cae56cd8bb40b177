package sluice.cache.internal

import org.apache.spark.sql.catalyst.expressions.UnsafeRow

import sluice.spark.StateStoreTypes.StateStore

/** The emission cache's rows in a state store, keys wrapped as one binary column (see [[EmitCacheLayout]]). */
private[sluice] final class UnsafeStoreAdapter(store: StateStore, layout: EmitCacheLayout) extends EmitStore {
  override def get(key: UnsafeRow): UnsafeRow = store.get(layout.storeKey(key))
  override def put(key: UnsafeRow, value: UnsafeRow): Unit = store.put(layout.storeKey(key), value)
  override def remove(key: UnsafeRow): Unit = store.remove(layout.storeKey(key))
  override def iterator(): Iterator[(UnsafeRow, UnsafeRow)] =
    store.iterator().map(p => (layout.groupingKey(p.key), p.value))
}
