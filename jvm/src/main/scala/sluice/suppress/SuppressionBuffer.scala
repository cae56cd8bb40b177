package sluice.suppress

import scala.collection.mutable.ArrayBuffer

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{GenericInternalRow, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.types.{LongType, StructField, StructType}

/**
 * Key-value storage for buffered entries, one value per key. The operator backs it with its
 * state store (and, for spill-to-disk, a second store on local disk); tests back it with a map.
 * Rows returned by `get`/`iterator` may be reused by the store: copy what is kept.
 */
trait BufferStore {
  def get(key: UnsafeRow): UnsafeRow // null when absent
  def put(key: UnsafeRow, value: UnsafeRow): Unit
  def remove(key: UnsafeRow): Unit
  def iterator(): Iterator[(UnsafeRow, UnsafeRow)]
}

/**
 * Layout of the stored rows. A key is a one-column row holding the suppression key as a struct;
 * a key whose struct is null holds the operator's own metadata (its stream time). A value is
 * (buffer time in ms, the latest row).
 */
final class BufferLayout(val keyStruct: StructType, val rowSchema: StructType) extends Serializable {
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
final class BufferStats {
  var buffered = 0L         // rows put into the buffer
  var emitted = 0L          // rows emitted because they were due
  var absorbed = 0L         // updates that replaced a buffered row (intermediate results suppressed)
  var evicted = 0L          // rows emitted early because the buffer was full
  var records = 0L          // rows in the in-memory part after the batch
  var bytes = 0L            // bytes of the in-memory part after the batch
  var bytesMax = 0L         // largest in-memory size seen during the batch
  var diskRecords = 0L
  var diskBytes = 0L
  var minBufferTime: Long = Long.MaxValue // earliest buffer time left after the batch
}

/**
 * The suppression buffer of one partition: per key the latest row and the time it was first
 * buffered, released in buffer-time terms by [[drain]], bounded by a [[BufferConfig]].
 *
 * An update keeps the entry's original buffer time: its timer is not restarted (KIP-328).
 * Fullness (records > maxRecords or bytes > maxBytes) is checked after the due rows of a batch
 * are released, on the in-memory part; spilled entries live in `disk` and never count there.
 */
final class SuppressionBuffer(
    layout: BufferLayout,
    memory: BufferStore,
    disk: Option[BufferStore],
    config: BufferConfig,
    operatorName: String,
    partition: Int) {

  val stats = new BufferStats
  private val metaKey = layout.metaKey
  require(config.whenFull != BufferFullStrategy.SpillToDisk || disk.isDefined, "spill-to-disk needs a disk store")

  /** The operator's stream time kept in the buffer's metadata entry, if any. */
  def storedStreamTime: Option[Long] = Option(memory.get(metaKey)).map(layout.bufferTime)
  def storeStreamTime(t: Long): Unit = memory.put(metaKey, layout.value(t, null))

  /**
   * Buffers `row` under `key`: a new key gets `newBufferTime`, a buffered key keeps its time and
   * gets the new row. Returns the entry's buffer time.
   */
  def put(key: UnsafeRow, row: InternalRow, newBufferTime: Long): Long = {
    stats.buffered += 1
    val inMemory = memory.get(key)
    if (inMemory != null) {
      val t = layout.bufferTime(inMemory)
      memory.put(key, layout.value(t, row))
      stats.absorbed += 1
      t
    } else {
      val onDisk = disk.map(_.get(key)).orNull
      if (onDisk != null) {
        val t = layout.bufferTime(onDisk)
        disk.get.put(key, layout.value(t, row))
        stats.absorbed += 1
        t
      } else {
        memory.put(key, layout.value(newBufferTime, row))
        newBufferTime
      }
    }
  }

  /**
   * Emits (and removes) every entry whose buffer time `isDue`, then applies the bound: emits the
   * oldest early, fails, or spills the newest to disk until the in-memory part is within it.
   */
  def drain(isDue: Long => Boolean, emit: UnsafeRow => Unit): Unit = {
    // (buffer time, key, size) of the in-memory entries kept, when the bound may need them.
    val kept = if (config.isBounded) new ArrayBuffer[(Long, UnsafeRow, Long)] else null
    var records = 0L
    var bytes = 0L
    var releasedBytes = 0L
    var memoryMin = Long.MaxValue
    val dueKeys = new ArrayBuffer[UnsafeRow]
    memory.iterator().foreach { case (k, v) =>
      if (!layout.isMeta(k)) {
        val t = layout.bufferTime(v)
        val size = (k.getSizeInBytes + v.getSizeInBytes).toLong
        if (isDue(t)) {
          emit(layout.row(v).copy())
          dueKeys += k.copy()
          releasedBytes += size
          stats.emitted += 1
        } else {
          records += 1
          bytes += size
          memoryMin = math.min(memoryMin, t)
          if (kept != null) kept += ((t, k.copy(), size))
        }
      }
    }
    dueKeys.foreach(memory.remove)
    // Before releasing, the in-memory part also held the due rows.
    stats.bytesMax = math.max(stats.bytesMax, bytes + releasedBytes)

    var diskMin = Long.MaxValue
    disk.foreach { d =>
      val dueOnDisk = new ArrayBuffer[UnsafeRow]
      d.iterator().foreach { case (k, v) =>
        val t = layout.bufferTime(v)
        if (isDue(t)) {
          emit(layout.row(v).copy())
          dueOnDisk += k.copy()
          stats.emitted += 1
        } else {
          stats.diskRecords += 1
          stats.diskBytes += k.getSizeInBytes + v.getSizeInBytes
          diskMin = math.min(diskMin, t)
        }
      }
      dueOnDisk.foreach(d.remove)
    }

    def full = records > config.maxRecords || bytes > config.maxBytes
    if (full) {
      config.whenFull match {
        case BufferFullStrategy.ShutDown =>
          throw new BufferFullException(operatorName, partition, records, config.maxRecords, bytes, config.maxBytes)
        case BufferFullStrategy.EmitEarly =>
          val oldestFirst = kept.sortBy(_._1).iterator.buffered
          while (full && oldestFirst.hasNext) {
            val (_, k, size) = oldestFirst.next()
            emit(layout.row(memory.get(k)).copy())
            memory.remove(k)
            records -= 1
            bytes -= size
            stats.evicted += 1
          }
          memoryMin = if (oldestFirst.hasNext) oldestFirst.head._1 else Long.MaxValue
        case BufferFullStrategy.SpillToDisk =>
          // The newest entries are the last to become due: they go to disk first.
          val newestFirst = kept.sortBy(e => -e._1).iterator
          while (full && newestFirst.hasNext) {
            val (t, k, size) = newestFirst.next()
            disk.get.put(k, memory.get(k).copy())
            memory.remove(k)
            records -= 1
            bytes -= size
            stats.diskRecords += 1
            stats.diskBytes += size
            diskMin = math.min(diskMin, t)
          }
      }
    }
    stats.records = records
    stats.bytes = bytes
    stats.minBufferTime = math.min(memoryMin, diskMin)
  }
}
