package sluice.cache

import java.util.{HashMap => JHashMap, TreeMap => JTreeMap}

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{BoundReference, GenericInternalRow, JoinedRow, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter
import org.apache.spark.sql.types.{BinaryType, LongType, StructField, StructType}

/** The rows the emission cache keeps durably: one per key (get/put/remove/scan of one partition). */
trait EmitStore {
  def put(key: UnsafeRow, value: UnsafeRow): Unit
  def remove(key: UnsafeRow): Unit
  def iterator(): Iterator[(UnsafeRow, UnsafeRow)]
}

/**
 * State layout of the emission cache: key = the aggregation's grouping columns; value = the latest
 * output row, the batch time its key entered the cache, and an update sequence number (its LRU order).
 */
final class EmitLayout(val keySchema: StructType, rowSchema: StructType) extends Serializable {
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

final case class EmitStats(forwarded: Long, absorbed: Long, evicted: Long, bytes: Long, entries: Long,
    nextDueMs: Long)

/**
 * One partition's emission cache for one micro-batch (Kafka Streams' caching in front of
 * downstream forwarding, KIP-63). The latest row per key is held; all held rows are forwarded
 * together once the oldest has waited `intervalMs` (batch time, so a replayed batch does the same),
 * and least recently updated rows are forwarded early whenever the held bytes exceed `maxBytes`.
 * Held rows live in `store`, so a restart loses nothing.
 */
final class EmissionCache(layout: EmitLayout, store: EmitStore, maxBytes: Long, intervalMs: Long,
    batchMs: Long, batchId: Long) {
  private final class Entry(val key: UnsafeRow, var value: UnsafeRow, var changed: Boolean) {
    def size: Long = key.getSizeInBytes.toLong + value.getSizeInBytes + RecordCache.EntryOverheadBytes
  }
  private val entries = new JHashMap[UnsafeRow, Entry]()
  private val bySeq = new JTreeMap[java.lang.Long, Entry]() // least recently updated first
  private var bytes = 0L
  private var nextSeq = batchId << 32 // increasing across batches, deterministic on replay
  private var forwarded, absorbed, evicted = 0L

  store.iterator().foreach { case (k, v) =>
    val e = new Entry(k.copy(), v.copy(), changed = false)
    entries.put(e.key, e)
    bySeq.put(layout.seq(e.value), e)
    bytes += e.size
  }

  /** Takes one updated row of `key` (a copy the cache may keep); forwards evicted rows to `out`. */
  def update(key: UnsafeRow, row: InternalRow, out: InternalRow => Unit): Unit = {
    val old = entries.get(key)
    val insertMs = if (old == null) batchMs else {
      absorbed += 1 // the previous update of this key is replaced without being forwarded
      bySeq.remove(layout.seq(old.value))
      bytes -= old.size
      layout.insertMs(old.value)
    }
    val e = new Entry(key, layout.encode(row, insertMs, nextSeq), changed = true)
    nextSeq += 1
    entries.put(key, e)
    bySeq.put(layout.seq(e.value), e)
    bytes += e.size
    while (bytes > maxBytes && !bySeq.isEmpty) {
      evicted += 1
      forward(bySeq.firstEntry().getValue, out)
    }
  }

  /** Forwards everything when due, writes what stays, and reports the batch. */
  def finish(out: InternalRow => Unit): EmitStats = {
    // Rows kept from earlier batches may exceed this batch's share (the slot's other partitions
    // grew): forward the least recently updated first, as an update over the share would.
    while (bytes > maxBytes && !bySeq.isEmpty) {
      evicted += 1
      forward(bySeq.firstEntry().getValue, out)
    }
    val oldest = if (entries.isEmpty) Long.MaxValue else {
      var m = Long.MaxValue
      entries.values().forEach(e => m = math.min(m, layout.insertMs(e.value)))
      m
    }
    if (oldest != Long.MaxValue && oldest + intervalMs <= batchMs) {
      while (!bySeq.isEmpty) forward(bySeq.firstEntry().getValue, out)
    } else {
      entries.values().forEach(e => if (e.changed) store.put(e.key, e.value))
    }
    val nextDue = if (entries.isEmpty) Long.MaxValue else oldest + intervalMs
    EmitStats(forwarded, absorbed, evicted, bytes, entries.size.toLong, nextDue)
  }

  private def forward(e: Entry, out: InternalRow => Unit): Unit = {
    bySeq.remove(layout.seq(e.value))
    entries.remove(e.key)
    bytes -= e.size
    store.remove(e.key)
    forwarded += 1
    out(layout.decode(e.value))
  }
}
