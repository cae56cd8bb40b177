package sluice.windowstore

import java.util.concurrent.{ConcurrentHashMap, ConcurrentSkipListMap}

import scala.collection.mutable.ArrayBuffer
import scala.jdk.CollectionConverters._

import org.apache.spark.sql.catalyst.expressions.{BoundReference, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.execution.streaming.state.UnsafeRowPair
import org.apache.spark.sql.types.{StructType, TimestampNTZType, TimestampType}
import org.apache.spark.unsafe.Platform

/** One window start's entries (or all window-less entries), with their estimated size. */
private[windowstore] final class Segment(val start: Long) {
  val map = new ConcurrentHashMap[UnsafeRow, UnsafeRow]()
  var bytes: Long = 0L
  /** False while the segment is out of the segment map (emptied or expired). */
  var live: Boolean = true
}

/** One change of the open version: a key's previous and new value (null: absent), or a segment
 *  that expiry dropped (key null). */
private[windowstore] final class Op(val key: UnsafeRow, val prev: UnsafeRow, val value: UnsafeRow,
    val dropped: Segment)

/**
 * Where a key row carries its window: the ordinal of the first top-level struct field that has
 * `start` and `end` timestamps (`window`, `session_window`, or a renamed window column), and the
 * position of `start` inside it. Keys of other schemas have no window.
 */
private[windowstore] final case class WindowField(ordinal: Int, structFields: Int, startIndex: Int)

private[windowstore] object WindowField {
  def find(keySchema: StructType): Option[WindowField] = {
    keySchema.fields.zipWithIndex.collectFirst {
      case (f, i) if (f.dataType match {
        case s: StructType => isWindow(s)
        case _ => false
      }) =>
        val s = f.dataType.asInstanceOf[StructType]
        WindowField(i, s.length, s.fieldNames.indexOf("start"))
    }
  }

  private def isWindow(s: StructType): Boolean = {
    def isTs(name: String) = s.fields.exists(f => f.name == name &&
      (f.dataType == TimestampType || f.dataType == TimestampNTZType))
    isTs("start") && isTs("end")
  }
}

/**
 * The live state of one store: window-less keys in one segment, windowed keys in a sorted map of
 * segments by window start, so that expiry drops whole segments and never scans other state.
 *
 * There is one copy of the state. An open version appends each change to a log (key, previous
 * value, new value; or a segment expiry dropped): `rollback` undoes the log backwards, `commit`
 * hands its (key, new value) records to the delta file in order. No lookups beyond the change
 * itself, and nothing proportional to the state.
 *
 * Single writer: the provider hands out at most one open version at a time. Readers may iterate
 * while the writer mutates (concurrent maps, weakly consistent iterators), as Spark's operators
 * remove keys while iterating.
 */
private[windowstore] final class SegmentedStateMap(
    keySchema: StructType,
    numColsPrefixKey: Int,
    retentionMicros: Long) {
  import SegmentedStateMap._

  private val window: Option[WindowField] = WindowField.find(keySchema)
  private val windowOrdinal = window.map(_.ordinal).getOrElse(-1)
  private val windowBitsetBytes = window.map(w => ((w.structFields + 63) / 64) * 8).getOrElse(0)
  private val windowStartOffset = window.map(w => windowBitsetBytes + 8L * w.startIndex).getOrElse(0L)
  private val windowStartBit = window.map(_.startIndex).getOrElse(0)

  val hasWindow: Boolean = window.isDefined

  private val segments = new ConcurrentSkipListMap[java.lang.Long, Segment]()
  private val plain = new Segment(NoWindow)

  private val prefixIndex: ConcurrentHashMap[UnsafeRow, java.util.Set[UnsafeRow]] =
    if (numColsPrefixKey > 0) new ConcurrentHashMap() else null
  private lazy val prefixProjection: UnsafeProjection = UnsafeProjection.create(
    keySchema.fields.take(numColsPrefixKey).zipWithIndex.map { case (f, i) =>
      BoundReference(i, f.dataType, f.nullable)
    }.toSeq)

  // Written by the single writer only; read for metrics.
  private var _numKeys = 0L
  private var _bytes = 0L
  /** The segment of the last access: consecutive rows usually share a window. */
  private var lastSegment: Segment = null
  /** Largest window start put so far, in microseconds (Kafka's observed stream time). */
  @volatile var streamTime: Long = Long.MinValue

  // The open version's changes; null when no version is open.
  private var log: ArrayBuffer[Op] = null
  private var streamTimeAtOpen = Long.MinValue
  private var _droppedPuts = 0L

  def numKeys: Long = _numKeys
  def memoryBytes: Long = _bytes + segments.size() * SegmentOverhead
  def numSegments: Int = segments.size() + (if (plain.map.isEmpty) 0 else 1)
  /** Puts the open (or last) version dropped because their window had expired. */
  def droppedPuts: Long = _droppedPuts
  def isOpen: Boolean = log != null

  /** Window start of a key in microseconds, or NoWindow. */
  def windowStartOf(key: UnsafeRow): Long = {
    if (windowOrdinal < 0 || key.isNullAt(windowOrdinal)) NoWindow
    else {
      val offset = (key.getLong(windowOrdinal) >>> 32).toInt
      val base = key.getBaseOffset + offset
      val obj = key.getBaseObject
      val nullWord = Platform.getLong(obj, base + (windowStartBit / 64) * 8)
      if ((nullWord & (1L << (windowStartBit % 64))) != 0) NoWindow
      else Platform.getLong(obj, base + windowStartOffset)
    }
  }

  private def expiryThreshold: Long =
    if (retentionMicros <= 0 || streamTime == Long.MinValue) Long.MinValue
    else streamTime - retentionMicros

  /** Drops every segment whose window start is at or before stream time minus retention. */
  def expire(): Unit = {
    val threshold = expiryThreshold
    if (threshold != Long.MinValue) {
      var first = segments.firstEntry()
      while (first != null && first.getKey.longValue() <= threshold) {
        val seg = first.getValue
        segments.remove(first.getKey)
        seg.live = false
        detach(seg)
        if (log != null) log += new Op(null, null, null, seg)
        first = segments.firstEntry()
      }
    }
  }

  def begin(): Unit = {
    require(log == null, "a version is already open")
    log = new ArrayBuffer[Op](1024)
    streamTimeAtOpen = streamTime
    _droppedPuts = 0L
  }

  /** The open version's changes in order as (key, new value or null for a remove); closes it.
   *  Replaying them and then expiring by the final stream time yields the committed state. */
  def commit(): Iterator[(UnsafeRow, UnsafeRow)] = {
    require(log != null, "no open version")
    val ops = log
    log = null
    ops.iterator.filter(_.key != null).map(op => (op.key, op.value))
  }

  def rollback(): Unit = {
    if (log != null) {
      val ops = log
      log = null
      ops.reverseIterator.foreach { op =>
        if (op.key == null) {
          segments.put(op.dropped.start, op.dropped)
          op.dropped.live = true
          attach(op.dropped)
        } else if (op.prev == null) rawRemove(op.key)
        else rawPut(op.key, op.prev)
      }
      streamTime = streamTimeAtOpen
      _droppedPuts = 0L
    }
  }

  def get(key: UnsafeRow): UnsafeRow = {
    val seg = segmentOf(windowStartOf(key), create = false)
    if (seg == null) null else seg.map.get(key)
  }

  /** Kafka's put: advances stream time, expires segments, drops (and counts) an expired put. */
  def put(key: UnsafeRow, value: UnsafeRow): Unit = {
    val start = windowStartOf(key)
    if (start != NoWindow && retentionMicros > 0) {
      if (start > streamTime) {
        streamTime = start
        expire()
      }
      if (start <= expiryThreshold) {
        _droppedPuts += 1
        return
      }
    }
    val k = key.copy()
    val v = value.copy()
    val prev = putIn(segmentOf(start, create = true), k, v)
    if (log != null) log += new Op(k, prev, v, null)
  }

  def remove(key: UnsafeRow): Unit = {
    val seg = segmentOf(windowStartOf(key), create = false)
    if (seg != null) {
      val prev = removeFrom(seg, key)
      if (prev != null && log != null) log += new Op(key.copy(), prev, null, null)
    }
  }

  /** Applies a recovered record (no copy, no undo, no expiry). */
  def rawPut(key: UnsafeRow, value: UnsafeRow): Unit =
    putIn(segmentOf(windowStartOf(key), create = true), key, value)

  def rawRemove(key: UnsafeRow): Unit = {
    val seg = segmentOf(windowStartOf(key), create = false)
    if (seg != null) removeFrom(seg, key)
  }

  def iterator(): Iterator[UnsafeRowPair] = {
    val pair = new UnsafeRowPair()
    (segments.values().iterator().asScala ++ Iterator.single(plain)).flatMap { seg =>
      seg.map.entrySet().iterator().asScala.map(e => pair.withRows(e.getKey, e.getValue))
    }
  }

  /** Entries whose window starts in [from, to] (microseconds), segment by segment. */
  def rangeIterator(from: Long, to: Long): Iterator[UnsafeRowPair] = {
    val pair = new UnsafeRowPair()
    segments.subMap(from, true, to, true).values().iterator().asScala.flatMap { seg =>
      seg.map.entrySet().iterator().asScala.map(e => pair.withRows(e.getKey, e.getValue))
    }
  }

  def prefixScan(prefixKey: UnsafeRow): Iterator[UnsafeRowPair] = {
    require(prefixIndex != null, "prefix scan needs numColsPrefixKey > 0")
    val keys = prefixIndex.get(prefixKey)
    if (keys == null) Iterator.empty
    else {
      val pair = new UnsafeRowPair()
      // Materialized: callers remove keys of this prefix while iterating.
      keys.toArray(new Array[UnsafeRow](0)).iterator.flatMap { k =>
        val v = get(k)
        if (v == null) None else Some(pair.withRows(k, v))
      }
    }
  }

  def clear(): Unit = {
    segments.clear()
    plain.map.clear()
    plain.bytes = 0
    if (prefixIndex != null) prefixIndex.clear()
    _numKeys = 0
    _bytes = 0
    log = null
    lastSegment = null
  }

  private def segmentOf(start: Long, create: Boolean): Segment = {
    if (start == NoWindow) plain
    else {
      val last = lastSegment
      if (last != null && last.start == start && last.live) last
      else {
        val boxed = java.lang.Long.valueOf(start)
        var seg = segments.get(boxed)
        if (seg == null && create) {
          seg = new Segment(start)
          segments.put(boxed, seg)
        }
        if (seg != null) lastSegment = seg
        seg
      }
    }
  }

  private def putIn(seg: Segment, k: UnsafeRow, v: UnsafeRow): UnsafeRow = {
    val prev = seg.map.put(k, v)
    val delta = if (prev == null) {
      _numKeys += 1
      if (prefixIndex != null) indexAdd(k)
      entryBytes(k, v)
    } else {
      v.getSizeInBytes.toLong - prev.getSizeInBytes
    }
    seg.bytes += delta
    _bytes += delta
    prev
  }

  private def removeFrom(seg: Segment, key: UnsafeRow): UnsafeRow = {
    val prev = seg.map.remove(key)
    if (prev != null) {
      _numKeys -= 1
      val delta = entryBytes(key, prev)
      seg.bytes -= delta
      _bytes -= delta
      if (prefixIndex != null) indexRemove(key)
      if (seg.start != NoWindow && seg.map.isEmpty) {
        segments.remove(seg.start, seg)
        seg.live = false
      }
    }
    prev
  }

  private def detach(seg: Segment): Unit = {
    _numKeys -= seg.map.size()
    _bytes -= seg.bytes
    if (prefixIndex != null) seg.map.keySet().forEach(k => indexRemove(k))
  }

  private def attach(seg: Segment): Unit = {
    _numKeys += seg.map.size()
    _bytes += seg.bytes
    if (prefixIndex != null) seg.map.keySet().forEach(k => indexAdd(k))
  }

  private def indexAdd(key: UnsafeRow): Unit = {
    val prefix = prefixProjection(key).copy()
    prefixIndex.computeIfAbsent(prefix, _ => ConcurrentHashMap.newKeySet[UnsafeRow]()).add(key)
  }

  private def indexRemove(key: UnsafeRow): Unit = {
    val prefix = prefixProjection(key)
    prefixIndex.computeIfPresent(prefix, (_, set) => {
      set.remove(key)
      if (set.isEmpty) null else set
    })
  }
}

private[windowstore] object SegmentedStateMap {
  /** Segment id of keys without a window. */
  val NoWindow: Long = Long.MinValue
  /** Estimated JVM bytes per entry beyond the row bytes: two UnsafeRow objects, two byte arrays
   *  and a ConcurrentHashMap node plus its table slot. */
  val EntryOverhead = 136L
  val SegmentOverhead = 256L

  def entryBytes(k: UnsafeRow, v: UnsafeRow): Long =
    k.getSizeInBytes.toLong + v.getSizeInBytes + EntryOverhead
}
