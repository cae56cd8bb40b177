package sluice.state

import org.apache.spark.sql.catalyst.expressions.UnsafeRow

import sluice.spark.StateStoreTypes.StateStore

/**
 * One partition's rows of a sluice operator, one value per key: the parts of suppress's buffer and
 * the rows the emission cache holds. Operators back it with a state store ([[KeyedRows.of]]); tests
 * back it with a map. Rows returned by `get`/`iterator` may be reused by the store: copy what is kept.
 */
private[sluice] trait KeyedRows {

  /** The value of `key`, or null. */
  def get(key: UnsafeRow): UnsafeRow
  def put(key: UnsafeRow, value: UnsafeRow): Unit
  def remove(key: UnsafeRow): Unit
  def iterator(): Iterator[(UnsafeRow, UnsafeRow)]
}

private[sluice] object KeyedRows {

  /** The default column family of `store`, keys as the store holds them. */
  def of(store: StateStore): KeyedRows = of(store, identity, identity)

  /**
   * The default column family of `store`, which holds each key as `toStored` makes it and gives it
   * back through `fromStored` (the emission cache keeps its keys' bytes in one binary column).
   */
  def of(store: StateStore, toStored: UnsafeRow => UnsafeRow, fromStored: UnsafeRow => UnsafeRow): KeyedRows =
    new KeyedRows {
      override def get(key: UnsafeRow): UnsafeRow = store.get(toStored(key))
      override def put(key: UnsafeRow, value: UnsafeRow): Unit = store.put(toStored(key), value)
      override def remove(key: UnsafeRow): Unit = store.remove(toStored(key))
      override def iterator(): Iterator[(UnsafeRow, UnsafeRow)] =
        store.iterator().map(p => (fromStored(p.key), p.value))
    }
}
