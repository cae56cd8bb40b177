package sluice.cache.internal

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.unsafe.types.ByteArray

import sluice.state.KeyedRows

/**
 * What the emission cache knows of one partition's held rows without reading them: their bytes,
 * their forward order (batch of the last update, then the key's bytes) and how many entered the
 * cache at each batch time. Built by one scan of the store when no cached index reflects the
 * version opened ([[EmitCacheIndexCache]]), then kept up to date batch by batch, so a batch reads only
 * the rows it updates and the rows it forwards. It costs about a key's bytes and 40 bytes per held
 * row, beside the held rows the cache's share bounds.
 */
private[sluice] final class EmitCacheIndex {
  import EmitCacheIndex.Slot
  private val order = new java.util.TreeSet[Slot]()
  private val entered = new java.util.TreeMap[java.lang.Long, java.lang.Integer]() // insert ms -> rows
  private var held = 0L

  def bytes: Long = held
  def size: Int = order.size
  def isEmpty: Boolean = order.isEmpty

  /** The earliest time a held row entered the cache, or Long.MaxValue when none is held. */
  def oldestInsertMs: Long = if (entered.isEmpty) Long.MaxValue else entered.firstKey()

  private[cache] def add(slot: Slot): Unit = {
    if (order.add(slot)) {
      held += slot.size
      entered.merge(slot.insertMs, 1, (a: Integer, b: Integer) => a + b)
    }
  }

  private[cache] def remove(slot: Slot): Unit = if (order.remove(slot)) forget(slot)

  /** The held row forwarded next (least recently updated), removed; null when none is held. */
  private[cache] def pollFirst(): Slot = {
    val slot = order.pollFirst()
    if (slot != null) forget(slot)
    slot
  }

  private def forget(slot: Slot): Unit = {
    held -= slot.size
    val n = entered.get(slot.insertMs) - 1
    if (n == 0) entered.remove(slot.insertMs) else entered.put(slot.insertMs, n)
  }
}

private[sluice] object EmitCacheIndex {

  /** A held row in forward order: compared by (seq, key bytes) only. */
  final class Slot(val seq: Long, val key: Array[Byte], val insertMs: Long, val size: Long) extends Comparable[Slot] {
    override def compareTo(o: Slot): Int = {
      val bySeq = java.lang.Long.compare(seq, o.seq)
      if (bySeq != 0) bySeq else ByteArray.compareBinary(key, o.key)
    }
  }

  def entryBytes(key: UnsafeRow, value: UnsafeRow): Long =
    key.getSizeInBytes.toLong + value.getSizeInBytes + RecordCache.EntryOverheadBytes

  def slot(layout: EmitCacheLayout, key: UnsafeRow, value: UnsafeRow): Slot =
    new Slot(layout.seq(value), key.getBytes, layout.insertMs(value), entryBytes(key, value))

  /** The index of everything `store` holds (one full scan). */
  def scan(layout: EmitCacheLayout, store: KeyedRows): EmitCacheIndex = {
    val index = new EmitCacheIndex
    store.iterator().foreach { case (k, v) => index.add(slot(layout, k.copy(), v)) }
    index
  }
}
