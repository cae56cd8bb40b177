package sluice.suppress.internal

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{GenericInternalRow, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.types.{LongType, StructField, StructType}

import sluice.state.KeyedRows
import sluice.suppress._

/**
 * Layout of the stored rows. A key is a one-column row holding the suppression key as a struct;
 * a key whose struct is null holds the operator's own metadata (its stream time). A value is
 * (buffer time in ms, the latest row).
 */
private[sluice] final class BufferLayout(val keyStruct: StructType, val rowSchema: StructType) extends Serializable {
  val keySchema: StructType = StructType(Seq(StructField("key", keyStruct, nullable = true)))
  val valueSchema: StructType = StructType(Seq(
      StructField("bufferTime", LongType, nullable = false),
      StructField("row", rowSchema, nullable = true)))

  @transient private lazy val keyProj = UnsafeProjection.create(keySchema)
  @transient private lazy val valueProj = UnsafeProjection.create(valueSchema)
  @transient private lazy val keyHolder = new GenericInternalRow(1)
  @transient private lazy val valueHolder = new GenericInternalRow(2)

  /**
   * The key row for a suppression key (an InternalRow with the key columns). Like [[value]], the
   * result is reused by the next call: state stores copy what they keep, callers copy what they hold.
   */
  def key(keyFields: InternalRow): UnsafeRow = { keyHolder.update(0, keyFields); keyProj(keyHolder) }
  def metaKey: UnsafeRow = { keyHolder.update(0, null); keyProj(keyHolder).copy() }
  def isMeta(key: UnsafeRow): Boolean = key.isNullAt(0)

  def value(bufferTime: Long, row: InternalRow): UnsafeRow = {
    valueHolder.update(0, bufferTime)
    valueHolder.update(1, row)
    valueProj(valueHolder)
  }
  def bufferTime(value: UnsafeRow): Long = value.getLong(0)
  def row(value: UnsafeRow): UnsafeRow = value.getStruct(1, rowSchema.length)
}

/** Counters of one partition's buffer for one micro-batch (the operator's custom metrics). */
private[sluice] final class BufferStats {
  var buffered = 0L // rows put into the buffer
  var emitted = 0L // rows emitted because they were due
  var absorbed = 0L // updates that replaced a buffered row (intermediate results suppressed)
  var evicted = 0L // rows emitted early because the buffer was full
  var records = 0L // rows in the in-memory part after the batch
  var bytes = 0L // bytes of the in-memory part after the batch
  var bytesMax = 0L // largest in-memory size seen during the batch (sampled at every put)
  var diskRecords = 0L
  var diskBytes = 0L
  var minBufferTime: Long = Long.MaxValue // earliest buffer time left after the batch
}

/**
 * One part of the buffer (in memory: the operator's state store; on disk: its spill store) with the
 * index of its entries.
 */
private[sluice] final class IndexedStore(val store: KeyedRows, val index: BufferIndex)

private[sluice] object IndexedStore {

  /** Indexes `store` from a full scan (the buffer's metadata entry is not an entry). */
  def scan(layout: BufferLayout, store: KeyedRows): BufferIndex = {
    val index = new BufferIndex
    store.iterator().foreach { case (k, v) =>
      if (!layout.isMeta(k)) index.add(layout.bufferTime(v), k, (k.getSizeInBytes + v.getSizeInBytes).toLong)
    }
    index
  }
}

/**
 * The suppression buffer of one partition: per key the latest row and the time it was first
 * buffered, in an in-memory part (the operator's state store) and, for spill-to-disk, a disk part.
 *
 * The bound follows each put, as in Kafka Streams: [[put]] buffers a row, then [[enforceBound]]
 * emits the oldest early, spills the newest to disk, or fails, so the in-memory part never exceeds
 * its bound by more than the row just put. What is due is released by [[afterPut]] once a batch's
 * rows are all in (see SuppressExec for why not after each row). Every walk
 * follows [[BufferIndex]] order (buffer time, then key bytes) and touches only the entries it
 * releases, evicts or moves; nothing here iterates a whole store.
 *
 * An update keeps the entry's original buffer time: its timer is not restarted (KIP-328).
 * Full means records > maxRecords or bytes > maxBytes, on the in-memory part only.
 *
 * Which entries a full buffer evicts or spills depends on the order rows are put (as in Kafka
 * Streams, which sees one record at a time); the operator gives a bounded buffer its rows in a
 * fixed order, so that a replayed batch makes the same choices.
 */
private[sluice] final class SuppressionBuffer(
    layout: BufferLayout,
    memory: IndexedStore,
    disk: Option[IndexedStore],
    config: BufferConfig,
    operatorName: String,
    partition: Int) {

  val stats = new BufferStats
  private val metaKey = layout.metaKey
  private val keyFields = layout.keySchema.length
  require(config.whenFull != BufferFullStrategy.SpillToDisk || disk.isDefined, "spill-to-disk needs a disk store")
  stats.bytesMax = memory.index.bytes

  /** The operator's stream time kept in the buffer's metadata entry, if any. */
  def storedStreamTime: Option[Long] = Option(memory.store.get(metaKey)).map(layout.bufferTime)
  def storeStreamTime(t: Long): Unit = memory.store.put(metaKey, layout.value(t, null))

  /**
   * Buffers `row` under `key`: a new key gets `newBufferTime` (in memory), a buffered key keeps
   * its time and place and gets the new row. Returns the entry's buffer time.
   */
  def put(key: UnsafeRow, row: InternalRow, newBufferTime: Long): Long = {
    stats.buffered += 1
    val t = replace(memory, key, row)
      .orElse(disk.flatMap(replace(_, key, row)))
      .getOrElse {
        val value = layout.value(newBufferTime, row)
        memory.store.put(key, value)
        memory.index.add(newBufferTime, key, (key.getSizeInBytes + value.getSizeInBytes).toLong)
        newBufferTime
      }
    stats.bytesMax = math.max(stats.bytesMax, memory.index.bytes)
    t
  }

  /**
   * Drops `key`'s entry wherever it is buffered, emitting nothing: a retraction under a final-results
   * mode (the session it held was merged into another, its window no longer exists; Kafka Streams
   * drops such tombstones from final results too). Returns whether it was buffered.
   */
  def drop(key: UnsafeRow): Boolean = dropFrom(memory, key) || disk.exists(dropFrom(_, key))

  private def dropFrom(part: IndexedStore, key: UnsafeRow): Boolean = {
    val old = part.store.get(key)
    if (old == null) return false
    val t = layout.bufferTime(old)
    val size = (key.getSizeInBytes + old.getSizeInBytes).toLong
    part.store.remove(key)
    part.index.remove(t, key, size)
    true
  }

  /** Replaces the row of `key` in `part` if buffered there; returns its buffer time. */
  private def replace(part: IndexedStore, key: UnsafeRow, row: InternalRow): Option[Long] = {
    val old = part.store.get(key)
    if (old == null) return None
    // Read what is needed before the next store call: stores may reuse the returned row.
    val t = layout.bufferTime(old)
    val oldSize = old.getSizeInBytes
    val value = layout.value(t, row)
    val newSize = value.getSizeInBytes
    part.store.put(key, value)
    part.index.resize((newSize - oldSize).toLong)
    stats.absorbed += 1
    Some(t)
  }

  /**
   * What follows a put (and the start of a batch): releases the due entries, then applies the
   * bound. Lazy: each row is removed from the buffer as the iterator produces it, so a release of
   * many rows never holds them all. Consume it before the next put.
   */
  def afterPut(isDue: Long => Boolean): Iterator[UnsafeRow] = releaseDue(isDue) ++ enforceBound()

  /** Releases (emits and removes) entries whose buffer time `isDue`, in buffer order across both parts. */
  def releaseDue(isDue: Long => Boolean): Iterator[UnsafeRow] =
    Iterator.continually(releaseOne(isDue)).takeWhile(_ != null)

  private def releaseOne(isDue: Long => Boolean): UnsafeRow = {
    val fromMemory = memory.index.first
    val fromDisk = disk.map(_.index.first).orNull
    val (part, entry) =
      if (fromDisk == null || (fromMemory != null && BufferIndex.Order.compare(fromMemory, fromDisk) < 0)) {
        (memory, fromMemory)
      } else {
        (disk.get, fromDisk)
      }
    if (entry == null || !isDue(BufferIndex.bufferTime(entry))) return null
    stats.emitted += 1
    take(part, entry)
  }

  /** Removes `entry` from `part`, returning (a copy of) its row. */
  private def take(part: IndexedStore, entry: Array[Byte]): UnsafeRow = {
    val key = BufferIndex.key(entry, keyFields)
    val value = part.store.get(key)
    if (value == null) throw BufferIndex.outOfStep(key)
    val size = (key.getSizeInBytes + value.getSizeInBytes).toLong
    val row = layout.row(value).copy()
    part.store.remove(key)
    part.index.remove(BufferIndex.bufferTime(entry), key, size)
    row
  }

  private def full: Boolean = memory.index.records > config.maxRecords || memory.index.bytes > config.maxBytes

  /**
   * Brings the in-memory part within the bound: emit-early returns the oldest entries (lazily),
   * spill-to-disk moves the newest to disk, shut-down throws [[BufferFullException]] unless the
   * oldest entry is due at the end of the batch (`dueAtEnd`; see the ShutDown case).
   */
  def enforceBound(dueAtEnd: Long => Boolean = _ => false): Iterator[UnsafeRow] = {
    if (!config.isBounded || !full) return Iterator.empty
    config.whenFull match {
      case BufferFullStrategy.ShutDown =>
        // Entries that are due leave before the batch commits: a buffer over its bound only while
        // it still holds them is not full. They are a prefix of the order, so the check waits when
        // the oldest entry is due and is made again once they are released.
        val oldest = memory.index.first
        if (oldest != null && dueAtEnd(BufferIndex.bufferTime(oldest))) return Iterator.empty
        throw new BufferFullException(operatorName, partition, memory.index.records, config.maxRecords,
          memory.index.bytes, config.maxBytes)
      case BufferFullStrategy.EmitEarly =>
        Iterator.continually {
          if (full) { stats.evicted += 1; take(memory, memory.index.first) }
          else null
        }.takeWhile(_ != null)
      case BufferFullStrategy.SpillToDisk =>
        // The newest entries are the last to become due: they go to disk first.
        val d = disk.get
        while (full) {
          val entry = memory.index.last
          val key = BufferIndex.key(entry, keyFields)
          val stored = memory.store.get(key)
          if (stored == null) throw BufferIndex.outOfStep(key)
          val value = stored.copy()
          val size = (key.getSizeInBytes + value.getSizeInBytes).toLong
          d.store.put(key, value)
          d.index.add(BufferIndex.bufferTime(entry), key, size)
          memory.store.remove(key)
          memory.index.remove(BufferIndex.bufferTime(entry), key, size)
        }
        Iterator.empty
    }
  }

  /** Fills the after-batch figures of [[stats]]. */
  def finish(): BufferStats = {
    stats.records = memory.index.records
    stats.bytes = memory.index.bytes
    stats.diskRecords = disk.map(_.index.records).getOrElse(0L)
    stats.diskBytes = disk.map(_.index.bytes).getOrElse(0L)
    val firsts = (Some(memory) ++ disk).map(_.index.first).filter(_ != null).map(BufferIndex.bufferTime)
    stats.minBufferTime = if (firsts.isEmpty) Long.MaxValue else firsts.min
    stats
  }
}
