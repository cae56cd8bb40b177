package sluice.cache.internal

import java.util.{HashMap => JHashMap}

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{BoundReference, GenericInternalRow, JoinedRow, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter
import org.apache.spark.sql.types.{BinaryType, LongType, StructField, StructType}
import org.apache.spark.unsafe.types.ByteArray

import sluice.state.CommittedIndexCache

/** The rows the emission cache keeps durably: one per key (get/put/remove/scan of one partition). */
private[sluice] trait EmitStore {
  /** The held value of `key`, or null. */
  def get(key: UnsafeRow): UnsafeRow
  def put(key: UnsafeRow, value: UnsafeRow): Unit
  def remove(key: UnsafeRow): Unit
  def iterator(): Iterator[(UnsafeRow, UnsafeRow)]
}

/**
 * State layout of the emission cache: key = the aggregation's grouping columns; value = the latest
 * output row, the batch time its key entered the cache, and an update sequence number (its LRU order).
 */
private[sluice] final class EmitLayout(val keySchema: StructType, rowSchema: StructType) extends Serializable {
  /**
   * The store's key: the grouping key's UnsafeRow bytes in one binary column. The bytes are the
   * same equality as the key itself, and no store sees a window column it could act on.
   */
  val storeKeySchema: StructType = StructType(Seq(StructField("__sluice_emit_key", BinaryType, nullable = false)))
  val valueSchema: StructType = StructType(rowSchema.fields ++ Seq(
    StructField("__sluice_emit_insert_ms", LongType, nullable = false),
    StructField("__sluice_emit_seq", LongType, nullable = false)))
  private val width = rowSchema.length

  @transient private lazy val encodeProj = UnsafeProjection.create(valueSchema)
  @transient private lazy val decodeProj = UnsafeProjection.create(
    rowSchema.fields.zipWithIndex.map { case (f, i) => BoundReference(i, f.dataType, f.nullable) }.toSeq)

  // Reused per row: each task deserializes its own layout, and encode copies its result.
  @transient private lazy val tail = new GenericInternalRow(2)
  @transient private lazy val joined = new JoinedRow()

  def encode(row: InternalRow, insertMs: Long, seq: Long): UnsafeRow = {
    tail.setLong(0, insertMs)
    tail.setLong(1, seq)
    encodeProj(joined(row, tail)).copy()
  }
  def decode(value: UnsafeRow): UnsafeRow = decodeProj(value).copy()
  def storeKey(key: UnsafeRow): UnsafeRow = {
    val w = new UnsafeRowWriter(1, key.getSizeInBytes)
    w.resetRowWriter()
    w.write(0, key.getBytes)
    w.getRow
  }
  def groupingKey(storeKey: UnsafeRow): UnsafeRow = {
    val bytes = storeKey.getBinary(0)
    val k = new UnsafeRow(keySchema.length)
    k.pointTo(bytes, bytes.length)
    k
  }
  def insertMs(value: UnsafeRow): Long = value.getLong(width)
  def seq(value: UnsafeRow): Long = value.getLong(width + 1)
}

private[sluice] final case class EmitStats(forwarded: Long, absorbed: Long, evicted: Long, bytes: Long, entries: Long,
    nextDueMs: Long)

/**
 * What the emission cache knows of one partition's held rows without reading them: their bytes,
 * their forward order (batch of the last update, then the key's bytes) and how many entered the
 * cache at each batch time. Built by one scan of the store when no cached index reflects the
 * version opened ([[EmitIndexCache]]), then kept up to date batch by batch, so a batch reads only
 * the rows it updates and the rows it forwards. It costs about a key's bytes and 40 bytes per held
 * row, beside the held rows the cache's share bounds.
 */
private[sluice] final class EmitIndex {
  import EmitIndex.Slot
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

private[sluice] object EmitIndex {
  /** A held row in forward order: compared by (seq, key bytes) only. */
  final class Slot(val seq: Long, val key: Array[Byte], val insertMs: Long, val size: Long) extends Comparable[Slot] {
    override def compareTo(o: Slot): Int = {
      val bySeq = java.lang.Long.compare(seq, o.seq)
      if (bySeq != 0) bySeq else ByteArray.compareBinary(key, o.key)
    }
  }

  def entryBytes(key: UnsafeRow, value: UnsafeRow): Long =
    key.getSizeInBytes.toLong + value.getSizeInBytes + RecordCache.EntryOverheadBytes

  def slot(layout: EmitLayout, key: UnsafeRow, value: UnsafeRow): Slot =
    new Slot(layout.seq(value), key.getBytes, layout.insertMs(value), entryBytes(key, value))

  /** The index of everything `store` holds (one full scan). */
  def scan(layout: EmitLayout, store: EmitStore): EmitIndex = {
    val index = new EmitIndex
    store.iterator().foreach { case (k, v) => index.add(slot(layout, k.copy(), v)) }
    index
  }
}

/** The emission cache indexes of this executor, one per emission cache store. */
private[sluice] object EmitIndexCache extends CommittedIndexCache[EmitIndex]

/**
 * One partition's emission cache for one micro-batch (Kafka Streams' caching in front of
 * downstream forwarding, KIP-63). The latest row per key is held; all held rows are forwarded
 * together once the oldest has waited `intervalMs` (batch time, so a replayed batch does the same),
 * and least recently updated rows are forwarded early when the held bytes exceed `maxBytes`.
 * Held rows live in `store`, so a restart loses nothing; `index` describes them (see [[EmitIndex]]).
 *
 * Every decision is a function of the held rows and the batch's updates as a set, never of the order
 * the updates arrive in (a shuffle may deliver them in another order when a batch is replayed):
 * recency is the batch of a key's last update, ties broken by the key's bytes, and the share is
 * applied once the batch's updates are in. Between batches the cache holds at most `maxBytes`;
 * during one it also holds that batch's updates.
 */
private[sluice] final class EmissionCache(layout: EmitLayout, store: EmitStore, index: EmitIndex, maxBytes: Long,
    intervalMs: Long, batchMs: Long, batchId: Long) {
  private final class Entry(val key: UnsafeRow, val value: UnsafeRow, val inStore: Boolean)
  // This batch's updates, latest per key.
  private val pending = new JHashMap[UnsafeRow, Entry]()
  // Recency of this batch's updates; the shift keeps the scale of checkpoints that stored a
  // per-update sequence number below the batch id.
  private val seq = batchId << 32
  private var forwarded, absorbed, evicted = 0L
  private var nextDueMs = Long.MaxValue

  /** Takes one updated row of `key` (a copy the cache may keep). */
  def update(key: UnsafeRow, row: InternalRow): Unit = {
    val prev = pending.get(key)
    val (insertMs, inStore) = if (prev != null) {
      absorbed += 1 // the previous update of this key is replaced without being forwarded
      (layout.insertMs(prev.value), prev.inStore)
    } else {
      val held = store.get(key)
      if (held == null) (batchMs, false) else {
        absorbed += 1
        index.remove(EmitIndex.slot(layout, key, held))
        (layout.insertMs(held), true)
      }
    }
    pending.put(key, new Entry(key, layout.encode(row, insertMs, seq), inStore))
  }

  /**
   * Applies the share and the interval and returns the rows forwarded (least recently updated
   * first), as the caller pulls them. Once the iterator is exhausted the store and `index` are up
   * to date and [[stats]] is final.
   */
  def finish(): Iterator[InternalRow] = {
    pending.values().forEach(e => index.add(EmitIndex.slot(layout, e.key, e.value)))
    val early = new Iterator[InternalRow] {
      override def hasNext: Boolean = index.bytes > maxBytes && !index.isEmpty
      override def next(): InternalRow = { evicted += 1; forwardNext() }
    }
    early ++ {
      val oldest = index.oldestInsertMs
      if (oldest != Long.MaxValue && oldest + intervalMs <= batchMs) {
        new Iterator[InternalRow] {
          override def hasNext: Boolean = !index.isEmpty
          override def next(): InternalRow = forwardNext()
        }
      } else {
        pending.values().forEach(e => store.put(e.key, e.value))
        pending.clear()
        if (oldest != Long.MaxValue) nextDueMs = oldest + intervalMs
        Iterator.empty
      }
    }
  }

  /** Removes the least recently updated held row and returns its output row. */
  private def forwardNext(): InternalRow = {
    val slot = index.pollFirst()
    val key = new UnsafeRow(layout.keySchema.length)
    key.pointTo(slot.key, slot.key.length)
    val e = pending.remove(key)
    val row = layout.decode(if (e != null) e.value else store.get(key)) // a copy: the store may reuse its row
    if (e == null || e.inStore) store.remove(key)
    forwarded += 1
    row
  }

  def stats: EmitStats = EmitStats(forwarded, absorbed, evicted, index.bytes, index.size.toLong, nextDueMs)
}
