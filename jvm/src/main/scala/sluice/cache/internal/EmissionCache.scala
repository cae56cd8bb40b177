package sluice.cache.internal

import java.util.{HashMap => JHashMap}

import scala.collection.mutable.ArrayBuffer

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{BoundReference, GenericInternalRow, JoinedRow, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter
import org.apache.spark.sql.types.{BinaryType, LongType, StructField, StructType}
import org.apache.spark.unsafe.types.ByteArray

import sluice.cache.RecordCache

/** The rows the emission cache keeps durably: one per key (get/put/remove/scan of one partition). */
private[sluice] trait EmitStore {
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
 * One partition's emission cache for one micro-batch (Kafka Streams' caching in front of
 * downstream forwarding, KIP-63). The latest row per key is held; all held rows are forwarded
 * together once the oldest has waited `intervalMs` (batch time, so a replayed batch does the same),
 * and least recently updated rows are forwarded early when the held bytes exceed `maxBytes`.
 * Held rows live in `store`, so a restart loses nothing.
 *
 * Every decision is a function of the held rows and the batch's updates as a set, never of the order
 * the updates arrive in (a shuffle may deliver them in another order when a batch is replayed):
 * recency is the batch of a key's last update, ties broken by the key's bytes, and the share is
 * applied once the batch's updates are in. Between batches the cache holds at most `maxBytes`;
 * during one it also holds that batch's updates.
 */
private[sluice] final class EmissionCache(layout: EmitLayout, store: EmitStore, maxBytes: Long, intervalMs: Long,
    batchMs: Long, batchId: Long) {
  private final class Entry(val key: UnsafeRow, val value: UnsafeRow, val changed: Boolean, val inStore: Boolean) {
    def size: Long = key.getSizeInBytes.toLong + value.getSizeInBytes + RecordCache.EntryOverheadBytes
  }
  private val entries = new JHashMap[UnsafeRow, Entry]()
  private var bytes = 0L
  // Recency of this batch's updates; the shift keeps the scale of checkpoints that stored a
  // per-update sequence number below the batch id.
  private val seq = batchId << 32
  private var forwarded, absorbed, evicted = 0L
  private var nextDueMs = Long.MaxValue

  store.iterator().foreach { case (k, v) =>
    val e = new Entry(k.copy(), v.copy(), changed = false, inStore = true)
    entries.put(e.key, e)
    bytes += e.size
  }

  /** Takes one updated row of `key` (a copy the cache may keep). */
  def update(key: UnsafeRow, row: InternalRow): Unit = {
    val old = entries.get(key)
    val insertMs = if (old == null) batchMs else {
      absorbed += 1 // the previous update of this key is replaced without being forwarded
      bytes -= old.size
      layout.insertMs(old.value)
    }
    val e = new Entry(key, layout.encode(row, insertMs, seq), changed = true, inStore = old != null && old.inStore)
    entries.put(key, e)
    bytes += e.size
  }

  /**
   * Applies the share and the interval, writes what stays, and returns the rows forwarded (least
   * recently updated first). The store is up to date when this returns; [[stats]] is final.
   */
  def finish(): Iterator[InternalRow] = {
    val out = new ArrayBuffer[Entry]
    if (bytes > maxBytes) {
      val order = inForwardOrder(entries.values())
      var i = 0
      while (bytes > maxBytes && i < order.length) {
        val e = order(i)
        entries.remove(e.key)
        bytes -= e.size
        out += e
        evicted += 1
        i += 1
      }
    }
    var oldest = Long.MaxValue
    entries.values().forEach(e => oldest = math.min(oldest, layout.insertMs(e.value)))
    if (oldest != Long.MaxValue && oldest + intervalMs <= batchMs) {
      out ++= inForwardOrder(entries.values())
      entries.clear()
      bytes = 0L
    } else {
      entries.values().forEach(e => if (e.changed) store.put(e.key, e.value))
      if (oldest != Long.MaxValue) nextDueMs = oldest + intervalMs
    }
    out.foreach(e => if (e.inStore) store.remove(e.key))
    forwarded = out.size
    out.iterator.map(e => layout.decode(e.value))
  }

  def stats: EmitStats = EmitStats(forwarded, absorbed, evicted, bytes, entries.size.toLong, nextDueMs)

  // Least recently updated first; among rows updated in the same batch, by the key's bytes.
  private val forwardOrder: java.util.Comparator[Entry] = (a: Entry, b: Entry) => {
    val bySeq = java.lang.Long.compare(layout.seq(a.value), layout.seq(b.value))
    if (bySeq != 0) bySeq else ByteArray.compareBinary(a.key.getBytes, b.key.getBytes)
  }

  private def inForwardOrder(es: java.util.Collection[Entry]): Array[Entry] = {
    val a = es.toArray(new Array[Entry](0))
    java.util.Arrays.sort(a, forwardOrder)
    a
  }
}
