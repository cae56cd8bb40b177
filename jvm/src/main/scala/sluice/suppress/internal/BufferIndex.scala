package sluice.suppress.internal

import java.util.{Arrays, Comparator, TreeSet}

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.unsafe.Platform

/**
 * The entries of one buffer store in Kafka Streams' buffer order (`BufferKey.compareTo`): by
 * buffer time, then by the key's bytes (the key UnsafeRow's binary form) compared as unsigned
 * bytes, lexicographically. Every walk of a buffer (release, eviction, spill) follows this order,
 * so ties on buffer time never depend on a store's iteration order, and a batch touches only the
 * entries it changes and the entries at either end.
 *
 * An entry is one byte array, the buffer time (sign bit flipped, big-endian, so that unsigned byte
 * order is numeric order) followed by the key's bytes: one compare of two arrays orders two entries.
 * Also kept: the number of entries and their size in the store (key + value bytes), the figures the
 * buffer's bound is checked against.
 */
private[sluice] final class BufferIndex {
  import BufferIndex._

  private val entries = new TreeSet[Array[Byte]](Order)
  private var _bytes = 0L

  def records: Long = entries.size.toLong

  /** Key + value bytes of the indexed entries as stored. */
  def bytes: Long = _bytes
  def isEmpty: Boolean = entries.isEmpty

  /** Indexes an entry of `size` bytes (key + value) under `bufferTime`. */
  def add(bufferTime: Long, key: UnsafeRow, size: Long): Unit = {
    if (!entries.add(encode(bufferTime, key))) {
      throw new IllegalStateException(s"buffer index: entry ($bufferTime, $key) is already indexed")
    }
    _bytes += size
  }

  def remove(bufferTime: Long, key: UnsafeRow, size: Long): Unit = {
    if (!entries.remove(encode(bufferTime, key))) {
      throw new IllegalStateException(s"buffer index: entry ($bufferTime, $key) is not indexed")
    }
    _bytes -= size
  }

  /** The entry's size changed (its row was replaced). */
  def resize(delta: Long): Unit = _bytes += delta

  /** The first entry in buffer order, or null. */
  def first: Array[Byte] = if (entries.isEmpty) null else entries.first()

  /** The last entry in buffer order, or null. */
  def last: Array[Byte] = if (entries.isEmpty) null else entries.last()
}

private[sluice] object BufferIndex {

  /** Unsigned lexicographic byte order; a prefix sorts first, as Kafka's `Bytes` do. */
  val Order: Comparator[Array[Byte]] = (a: Array[Byte], b: Array[Byte]) => Arrays.compareUnsigned(a, b)

  def encode(bufferTime: Long, key: UnsafeRow): Array[Byte] = {
    val n = key.getSizeInBytes
    val out = new Array[Byte](8 + n)
    val t = bufferTime ^ Long.MinValue
    var i = 0
    while (i < 8) { out(i) = (t >>> (56 - 8 * i)).toByte; i += 1 }
    Platform.copyMemory(key.getBaseObject, key.getBaseOffset, out, Platform.BYTE_ARRAY_OFFSET + 8, n)
    out
  }

  def bufferTime(entry: Array[Byte]): Long = {
    var t = 0L
    var i = 0
    while (i < 8) { t = (t << 8) | (entry(i) & 0xffL); i += 1 }
    t ^ Long.MinValue
  }

  /**
   * An indexed key the store does not hold: the index does not reflect the store's version, which
   * happens only if a version was committed twice with different contents (a non-deterministic
   * replay), the case Spark's own providers' version caches do not handle either.
   */
  def outOfStep(key: UnsafeRow): IllegalStateException = new IllegalStateException(
    s"suppress buffer index lists key $key, which its state store does not hold: the store version was " +
      "rewritten with other contents (non-deterministic input to a replayed batch?)")

  /** The entry's key as a row over the entry's bytes (valid as long as the entry is). */
  def key(entry: Array[Byte], numFields: Int): UnsafeRow = {
    val row = new UnsafeRow(numFields)
    row.pointTo(entry, Platform.BYTE_ARRAY_OFFSET + 8, entry.length - 8)
    row
  }
}
