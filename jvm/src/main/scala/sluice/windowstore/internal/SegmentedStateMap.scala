package sluice.windowstore.internal

import java.util.concurrent.ConcurrentSkipListMap

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.catalyst.expressions.{BoundReference, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.types.{StructType, TimestampNTZType, TimestampType}
import org.apache.spark.unsafe.Platform

import sluice.spark.StateStoreTypes.UnsafeRowPair

/** One window start's entries (or all window-less entries). */
private[sluice] final class Segment(val start: Long, keyFields: Int, valueFields: Int) {

  /** Replaced only between versions, by compaction. */
  var table = new RowTable(keyFields, valueFields)

  /** False while the segment is out of the segment map (expired or pruned when empty). */
  var live: Boolean = true

  /** The change log that last listed this segment as touched. */
  var touchedBy: ChangeLog = null

  /** The change log whose commit found this segment empty (written as one cleared window). */
  var emptiedBy: ChangeLog = null

  /** Its number in the prefix index's anchors while the map may still refer to it, else -1. */
  var id: Int = -1
}

/**
 * The open version's changes, in order, as parallel arrays (no object per change): the segment,
 * the location the change wrote (Absent for a remove, Dropped for a segment that expiry dropped),
 * the location it replaced (Absent for a new key) and the replaced record's size. The arrays are
 * chunks of a fixed size, so a version of millions of changes (a window's eviction) grows without
 * copying what it holds.
 */
private[sluice] final class ChangeLog {
  import ChangeLog._
  private var segments = new Array[Array[Segment]](4)
  private var writtenLocs = new Array[Array[Long]](4)
  private var replacedLocs = new Array[Array[Long]](4)
  private var replacedSizes = new Array[Array[Int]](4)
  var size = 0

  /** Key and value bytes the version's puts wrote. */
  var bytesWritten = 0L

  def segment(i: Int): Segment = segments(i >>> ChunkBits)(i & ChunkMask)
  def written(i: Int): Long = writtenLocs(i >>> ChunkBits)(i & ChunkMask)
  def replaced(i: Int): Long = replacedLocs(i >>> ChunkBits)(i & ChunkMask)
  def replacedBytes(i: Int): Int = replacedSizes(i >>> ChunkBits)(i & ChunkMask)

  def add(seg: Segment, newLoc: Long, prevLoc: Long, prevBytes: Int): Unit = {
    val c = size >>> ChunkBits
    val j = size & ChunkMask
    if (j == 0) {
      if (c == segments.length) {
        segments = java.util.Arrays.copyOf(segments, c * 2)
        writtenLocs = java.util.Arrays.copyOf(writtenLocs, c * 2)
        replacedLocs = java.util.Arrays.copyOf(replacedLocs, c * 2)
        replacedSizes = java.util.Arrays.copyOf(replacedSizes, c * 2)
      }
      // The first chunk small: most versions change a few keys.
      val n = if (c == 0) 1024 else Chunk
      segments(c) = new Array[Segment](n)
      writtenLocs(c) = new Array[Long](n)
      replacedLocs(c) = new Array[Long](n)
      replacedSizes(c) = new Array[Int](n)
    } else if (c == 0 && j == segments(0).length) {
      segments(0) = java.util.Arrays.copyOf(segments(0), Chunk)
      writtenLocs(0) = java.util.Arrays.copyOf(writtenLocs(0), Chunk)
      replacedLocs(0) = java.util.Arrays.copyOf(replacedLocs(0), Chunk)
      replacedSizes(0) = java.util.Arrays.copyOf(replacedSizes(0), Chunk)
    }
    segments(c)(j) = seg
    writtenLocs(c)(j) = newLoc
    replacedLocs(c)(j) = prevLoc
    replacedSizes(c)(j) = prevBytes
    size += 1
    if (seg.touchedBy ne this) {
      seg.touchedBy = this
      touched += seg
    }
  }

  /** The segments this version touched, each once. */
  val touched = new scala.collection.mutable.ArrayBuffer[Segment]()

  /** Bytes its arrays hold: a segment reference (compressed), two locations and a size per change. */
  def heldBytes: Long =
    if (segments == null) 0L else segments.iterator.takeWhile(_ != null).map(_.length * BytesPerChange).sum

  /**
   * Lets the arrays go once the version is committed or rolled back. The log object lives on as
   * segments' `touchedBy` and `emptiedBy` marks, which are compared by identity only, until each
   * of those segments is touched by a later version; its arrays (over 100 MB for a version that
   * evicts millions of keys) must not live on with it.
   */
  def release(): Unit = {
    segments = null
    writtenLocs = null
    replacedLocs = null
    replacedSizes = null
    touched.clearAndShrink()
  }
}

private[sluice] object ChangeLog {

  /** Changes per chunk: 2^14, so a chunk of longs is 128 KiB, below half of G1's smallest region. */
  private val ChunkBits = 14
  private val Chunk = 1 << ChunkBits
  private val ChunkMask = Chunk - 1
  private val BytesPerChange = 4L + 8L + 8L + 4L
}

/**
 * Where a key row carries its window: the ordinal of the first top-level struct field that has
 * `start` and `end` timestamps (`window`, `session_window`, or a renamed window column), and the
 * position of `start` inside it. Keys of other schemas have no window.
 */
private[sluice] final case class WindowField(ordinal: Int, structFields: Int, startIndex: Int)

private[sluice] object WindowField {
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
    def isTs(name: String) = s.fields.exists(f =>
      f.name == name &&
      (f.dataType == TimestampType || f.dataType == TimestampNTZType))
    isTs("start") && isTs("end")
  }
}

/**
 * The live state of one store: window-less keys in one segment, windowed keys in a sorted map of
 * segments by window start, so that expiry drops whole segments and never scans other state.
 * Each segment is a [[RowTable]]: entries are bytes in pages, not objects. Prefix-scanned state
 * (`numColsPrefixKey > 0`) also has a [[PrefixIndex]] of primitive arrays: one entry per live key
 * of a live segment, holding the segment's id and the location of one of the key's records.
 *
 * There is one copy of the state. An open version records each change in a [[ChangeLog]] as
 * locations only, since no record is written over while a version may need it: `rollback` points
 * keys back at the records they replaced, `commit` hands the records the version wrote to the
 * delta file, in order. Then the records the version made garbage (replaced by `commit`, written
 * by `rollback`) are retired to their tables for later puts to write over (see [[RowTable.retire]]):
 * rows handed out stay valid until the next version begins. Nothing is proportional to the state.
 *
 * Single writer: the provider hands out at most one open version at a time. Spark's operators
 * remove keys while iterating; iterators are weakly consistent and see those removes.
 */
private[sluice] final class SegmentedStateMap(
    keySchema: StructType,
    valueFields: Int,
    numColsPrefixKey: Int,
    retentionMicros: Long) {
  import SegmentedStateMap._

  private val keyFields = keySchema.length
  private val window: Option[WindowField] = WindowField.find(keySchema)
  private val windowOrdinal = window.map(_.ordinal).getOrElse(-1)
  private val windowBitsetBytes = window.map(w => ((w.structFields + 63) / 64) * 8).getOrElse(0)
  private val windowStartOffset = window.map(w => windowBitsetBytes + 8L * w.startIndex).getOrElse(0L)
  private val windowStartBit = window.map(_.startIndex).getOrElse(0)

  val hasWindow: Boolean = window.isDefined

  // Segments by id, for the prefix index; the ids of segments gone for good are reused.
  private var segmentsById = new Array[Segment](16)
  private var freeIds = new Array[Int](16)
  private var freeIdCount = 0
  private var idCount = 0

  private val segments = new ConcurrentSkipListMap[java.lang.Long, Segment]()
  private val plain = newSegment(NoWindow)

  /** Recently used segments by a hash of their start: rows of one batch cycle through a few
   *  windows, and the skip list costs a dozen boxed comparisons per lookup. */
  private val recent = new Array[Segment](RecentSlots)

  private val index: PrefixIndex = if (numColsPrefixKey > 0) new PrefixIndex else null

  /** Pointed at keys in pages, to hash and compare them without allocating. */
  private val cursor = new UnsafeRow(keyFields)
  private lazy val prefixProjection: UnsafeProjection = UnsafeProjection.create(
    keySchema.fields.take(numColsPrefixKey).zipWithIndex.map { case (f, i) =>
      BoundReference(i, f.dataType, f.nullable)
    }.toSeq)

  /** Largest window start put so far, in microseconds (Kafka's observed stream time). */
  @volatile var streamTime: Long = Long.MinValue

  // The open version's changes; null when no version is open.
  private var log: ChangeLog = null
  private var streamTimeAtOpen = Long.MinValue
  private var _droppedPuts = 0L
  private var _compactionBytes = 0L

  /** Segments waiting for compaction, oldest first. */
  private val compactionDue = scala.collection.mutable.LinkedHashSet[Segment]()

  private def allSegments: Iterator[Segment] = segments.values().iterator().asScala ++ Iterator.single(plain)

  def numKeys: Long = allSegments.map(_.table.size.toLong).sum
  def memoryBytes: Long = allSegments.map(_.table.memoryBytes + SegmentOverhead).sum +
    (if (index == null) 0L else index.memoryBytes) + segmentsById.length * 8L + changeLogBytes

  /** The open version's change log, and any other a segment still refers to (none once released). */
  private def changeLogBytes: Long =
    (allSegments.flatMap(s => Iterator(s.touchedBy, s.emptiedBy)) ++ Iterator(log)).filter(_ != null)
      .toSeq.distinct.map(_.heldBytes).sum
  def numSegments: Int = segments.size() + (if (plain.table.isEmpty) 0 else 1)

  /** Puts the open (or last) version dropped because their window had expired. */
  def droppedPuts: Long = _droppedPuts

  /** Live record bytes that compaction copied after the last version, reclaiming the records it
   *  and earlier versions overwrote or removed. */
  def compactionBytes: Long = _compactionBytes
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

  private def expiryThreshold: Long = thresholdOf(streamTime)

  private def thresholdOf(time: Long): Long =
    if (retentionMicros <= 0 || time == Long.MinValue) Long.MinValue
    else time - retentionMicros

  /** Drops every segment whose window start is at or before stream time minus retention. */
  def expire(): Unit = {
    val threshold = expiryThreshold
    if (threshold != Long.MinValue) {
      var first = segments.firstEntry()
      while (first != null && first.getKey.longValue() <= threshold) {
        val seg = first.getValue
        unlink(seg)
        if (log != null) log.add(seg, Dropped, Absent, 0)
        first = segments.firstEntry()
      }
    }
  }

  def begin(): Unit = {
    require(log == null, "a version is already open")
    allSegments.foreach(_.table.endIterations()) // iterations a caller left unfinished
    log = new ChangeLog
    streamTimeAtOpen = streamTime
    _droppedPuts = 0L
    _compactionBytes = 0L
  }

  /** Writes the open version's changes in order as records (see [[RowTable.readRecord]]), then
   *  closes the version. Replaying them and then expiring by the final stream time yields the
   *  committed state. A window the version emptied is one record, not a removal per key: an
   *  aggregation evicts a closed window's keys all in the same batch. No other change touches
   *  its segment, so where that record stands among them does not matter. */
  def commit(out: java.io.OutputStream): Unit = {
    require(log != null, "no open version")
    expire() // by the stream time the version reached (see put)
    val ops = log
    val scratch = new Array[Byte](8)
    ops.touched.foreach { seg =>
      if (seg.live && seg.start != NoWindow && seg.table.isEmpty) {
        seg.emptiedBy = ops
        RowTable.writeClear(out, seg.start, scratch)
      }
    }
    var i = 0
    while (i < ops.size) {
      val seg = ops.segment(i)
      val written = ops.written(i)
      if (seg.emptiedBy eq ops) ()
      else if (written >= 0) seg.table.writeRecord(out, written)
      else if (written == Absent) seg.table.writeRemoval(out, ops.replaced(i), scratch)
      i += 1
    }
    log = null
    // Retired records are written over by later puts: no iteration may still hand them out.
    ops.touched.foreach(_.table.endIterations())
    i = 0
    while (i < ops.size) {
      val seg = ops.segment(i)
      // (an emptied segment leaves the map in tidy: its records go with it)
      if (ops.replaced(i) >= 0 && seg.live && (seg.emptiedBy ne ops)) {
        seg.table.retire(ops.replaced(i), ops.replacedBytes(i), maybeViewed = true)
      }
      i += 1
    }
    tidy(ops)
    ops.release()
  }

  def rollback(): Unit = {
    if (log != null) {
      val ops = log
      log = null
      var i = ops.size - 1
      while (i >= 0) {
        val seg = ops.segment(i)
        val written = ops.written(i)
        val replaced = ops.replaced(i)
        if (written == Dropped) link(seg)
        else {
          val keyLoc = if (written >= 0) written else replaced
          seg.table.restore(keyLoc, replaced)
          if (index != null) {
            if (replaced == Absent) {
              seg.table.pointKey(cursor, keyLoc)
              indexRemove(seg, cursor)
            } else if (written == Absent) indexAdd(seg, replaced)
          }
        }
        i -= 1
      }
      // What the version wrote is garbage now, and no frozen view saw it (views are taken
      // between versions).
      i = 0
      while (i < ops.size) {
        val seg = ops.segment(i)
        if (ops.written(i) >= 0 && seg.live) seg.table.retire(ops.written(i), maybeViewed = false)
        i += 1
      }
      streamTime = streamTimeAtOpen
      _droppedPuts = 0L
      _compactionBytes = 0L
      tidy(ops)
      ops.release()
    }
  }

  /** After a version: segments it emptied leave the map; segments with more garbage than
   *  entries are compacted, copying at most twice what the version wrote (and at least
   *  MinCompactionBudget), so that a batch costs what it changed while garbage, which grows no
   *  faster than writes, is still reclaimed; the rest wait for the next versions. */
  private def tidy(ops: ChangeLog): Unit = {
    ops.touched.foreach { seg =>
      if (seg.live) {
        if (seg.table.isEmpty && seg.start != NoWindow) unlink(seg)
        else if (seg.table.wantsCompaction) compactionDue += seg
      } else release(seg) // expired in the version, which no rollback can bring back now
    }
    var budget = math.max(MinCompactionBudget, 2 * ops.bytesWritten)
    while (budget > 0 && compactionDue.nonEmpty) {
      val seg = compactionDue.head
      compactionDue -= seg
      if (seg.live && seg.table.wantsCompaction) {
        budget -= seg.table.liveBytes
        _compactionBytes += seg.table.liveBytes
        val old = seg.table
        seg.table = old.compacted()
        if (index != null) reanchor(seg, old)
      }
    }
  }

  def get(key: UnsafeRow): UnsafeRow = {
    val seg = segmentOf(windowStartOf(key), create = false)
    if (seg == null) null else seg.table.get(key)
  }

  /**
   * Kafka's put: advances stream time and drops (and counts) a put of an expired window. Inside a
   * version, "expired" is judged by the stream time the version started with, and segments expire
   * when it commits: a micro-batch's puts arrive in an order Spark does not fix (shuffle fetches,
   * a record cache's flushes), so a put's fate must not depend on which of the batch's puts came
   * first, or a replayed batch could keep a different set of rows. Per micro-batch is as fine as
   * Spark's own watermark, which also advances between batches.
   */
  def put(key: UnsafeRow, value: UnsafeRow): Unit = {
    val start = windowStartOf(key)
    if (start != NoWindow && retentionMicros > 0) {
      if (start > streamTime) {
        streamTime = start
        if (log == null) expire()
      }
      val threshold = if (log == null) expiryThreshold else thresholdOf(streamTimeAtOpen)
      if (start <= threshold) {
        _droppedPuts += 1
        return
      }
    }
    val seg = segmentOf(start, create = true)
    val prev = putInto(seg, key, value)
    if (log != null) {
      log.add(seg, seg.table.lastWritten, prev, if (prev == Absent) 0 else seg.table.lastReplacedBytes)
      log.bytesWritten += key.getSizeInBytes + value.getSizeInBytes
    }
  }

  /** Puts the entry into the segment's table and keeps the prefix index in step: an anchor moves
   *  off the retired record the put will write over, a new key gets an entry. Returns the
   *  replaced location or [[Absent]]. */
  private def putInto(seg: Segment, key: UnsafeRow, value: UnsafeRow): Long = {
    if (index != null) moveAnchorOff(seg, seg.table.reusableFor(key, value))
    val prev = seg.table.put(key, value)
    if (index != null && prev == Absent) indexAdd(seg, seg.table.lastWritten)
    prev
  }

  def remove(key: UnsafeRow): Unit = {
    val seg = segmentOf(windowStartOf(key), create = false)
    if (seg != null) {
      val prev = seg.table.remove(key)
      if (prev != Absent) {
        if (log != null) log.add(seg, Absent, prev, seg.table.lastReplacedBytes)
        if (index != null) indexRemove(seg, key)
        if (log == null && seg.table.isEmpty && seg.start != NoWindow) unlink(seg)
      }
    }
  }

  /** Applies a recovered record (no undo, no expiry). */
  def rawPut(key: UnsafeRow, value: UnsafeRow): Unit = {
    putInto(segmentOf(windowStartOf(key), create = true), key, value)
  }

  def rawRemove(key: UnsafeRow): Unit = remove(key)

  /** Applies a recovered cleared window: its segment and every entry in it go. */
  def rawClear(start: Long): Unit = {
    if (start == NoWindow) throw new java.io.IOException("corrupt record (a cleared window without a start)")
    val seg = segmentOf(start, create = false)
    if (seg != null) unlink(seg)
  }

  def iterator(): Iterator[UnsafeRowPair] = pairs(allSegments)

  /** All entries and the stream time as of now, readable on another thread while versions go
   *  on (see [[RowTable.freeze]]); the caller holds off the writer during the call. */
  def freeze(): (Seq[RowTable.Frozen], Long) = (allSegments.map(_.table.freeze()).toList, streamTime)

  private def pairs(segs: Iterator[Segment]): Iterator[UnsafeRowPair] = {
    val pair = UnsafeRowPair()
    segs.flatMap(_.table.entries()).map { case (k, v) => pair.withRows(k, v) }
  }

  /** The entries whose key starts with `prefixKey` (a row of the first `numColsPrefixKey` key
   *  columns): the keys are collected first, as callers remove keys of the prefix while
   *  iterating, and each key's value is read when the iteration reaches it. A key is handed out
   *  over its live record, not the anchor's (which may be retired, and written over by a put
   *  while the caller still holds the key). */
  def prefixScan(prefixKey: UnsafeRow): Iterator[UnsafeRowPair] = {
    require(index != null, "prefix scan needs numColsPrefixKey > 0")
    val hash = prefixKey.hashCode()
    val keys = new scala.collection.mutable.ArrayBuffer[UnsafeRow](4)
    var e = index.head(hash)
    while (e != PrefixIndex.End) {
      if (index.hashOf(e) == hash) {
        val a = index.anchorOf(e)
        val table = segmentsById(segmentIdOf(a)).table
        table.pointKey(cursor, locationOf(a))
        // Another prefix may share the hash.
        if (prefixProjection(cursor) == prefixKey) keys += table.keyAt(table.liveLocation(cursor))
      }
      e = index.next(e)
    }
    if (keys.isEmpty) Iterator.empty
    else {
      val pair = UnsafeRowPair()
      keys.iterator.flatMap { k =>
        val v = get(k)
        if (v == null) None else Some(pair.withRows(k, v))
      }
    }
  }

  def clear(): Unit = {
    segments.clear()
    plain.table = new RowTable(keyFields, valueFields)
    java.util.Arrays.fill(segmentsById.asInstanceOf[Array[AnyRef]], null)
    freeIdCount = 0
    idCount = 0
    register(plain)
    if (index != null) index.clear()
    java.util.Arrays.fill(recent.asInstanceOf[Array[AnyRef]], null)
    compactionDue.clear()
    log = null
  }

  private def newSegment(start: Long): Segment = {
    val seg = new Segment(start, keyFields, valueFields)
    register(seg)
    seg
  }

  private def register(seg: Segment): Unit = {
    val id = if (freeIdCount > 0) {
      freeIdCount -= 1
      freeIds(freeIdCount)
    } else {
      if (idCount == segmentsById.length) segmentsById = java.util.Arrays.copyOf(segmentsById, idCount * 2)
      idCount += 1
      idCount - 1
    }
    segmentsById(id) = seg
    seg.id = id
  }

  /** Frees the id of a segment out of the map that no rollback can link again. */
  private def release(seg: Segment): Unit = if (seg.id >= 0) {
    segmentsById(seg.id) = null
    if (freeIdCount == freeIds.length) freeIds = java.util.Arrays.copyOf(freeIds, freeIdCount * 2)
    freeIds(freeIdCount) = seg.id
    freeIdCount += 1
    seg.id = -1
  }

  private def segmentOf(start: Long, create: Boolean): Segment = {
    if (start == NoWindow) plain
    else {
      val slot = (java.lang.Long.hashCode(start * 0x9e3779b97f4a7c15L) >>> 16) & (RecentSlots - 1)
      val cached = recent(slot)
      if (cached != null && cached.start == start && cached.live) cached
      else {
        val boxed = java.lang.Long.valueOf(start)
        var seg = segments.get(boxed)
        if (seg == null && create) {
          seg = newSegment(start)
          segments.put(boxed, seg)
        }
        if (seg != null) recent(slot) = seg
        seg
      }
    }
  }

  /** Takes a segment out of the map (expired, or emptied) with its keys' prefix entries; inside
   *  a version it keeps its id until the version ends (a rollback links it again). */
  private def unlink(seg: Segment): Unit = {
    segments.remove(seg.start, seg)
    seg.live = false
    if (index != null) {
      val t = seg.table
      t.foreachLocation { loc =>
        t.pointKey(cursor, loc)
        indexRemove(seg, cursor)
      }
    }
    if (log == null) release(seg)
  }

  /** Puts an unlinked segment back (a rollback of its expiry). */
  private def link(seg: Segment): Unit = {
    segments.put(seg.start, seg)
    seg.live = true
    if (index != null) seg.table.foreachLocation(loc => indexAdd(seg, loc))
  }

  // ---- prefix index ----

  private def prefixHash(key: UnsafeRow): Int = prefixProjection(key).hashCode()

  /** Adds the key of the record at `loc` in `seg`, a key not in the index. */
  private def indexAdd(seg: Segment, loc: Long): Unit = {
    seg.table.pointKey(cursor, loc)
    index.add(prefixHash(cursor), anchorOf(seg, loc))
  }

  private def indexRemove(seg: Segment, key: UnsafeRow): Unit = {
    val hash = prefixHash(key)
    val found = indexFind(seg, seg.table, key, hash)
    index.unlink(hash, (found >> 32).toInt, found.toInt)
  }

  /** The index entry of `key` in `seg`, whose anchors point into `table`, and the entry before
   *  it in the chain, as `previous << 32 | entry` (see [[PrefixIndex.unlink]]). */
  private def indexFind(seg: Segment, table: RowTable, key: UnsafeRow, hash: Int): Long = {
    var prev = PrefixIndex.End
    var e = index.head(hash)
    while (e != PrefixIndex.End) {
      if (index.hashOf(e) == hash) {
        val a = index.anchorOf(e)
        if (segmentIdOf(a) == seg.id && table.keyEqualsAt(key, locationOf(a))) {
          return prev.toLong << 32 | (e & 0xffffffffL)
        }
      }
      prev = e
      e = index.next(e)
    }
    throw new IllegalStateException(s"prefix index has no entry for a key of segment ${seg.start}")
  }

  /**
   * Before a put writes over the retired record at `loc` (or for [[Absent]], nothing): an index
   * entry may still anchor there, as an overwrite leaves the entry on the key's older record; it
   * is moved to the key's live record, which a key with an entry always has.
   */
  private def moveAnchorOff(seg: Segment, loc: Long): Unit = if (loc != Absent) {
    val t = seg.table
    t.pointKey(cursor, loc)
    val hash = prefixHash(cursor)
    val anchor = anchorOf(seg, loc)
    var e = index.head(hash)
    while (e != PrefixIndex.End && index.anchorOf(e) != anchor) e = index.next(e)
    if (e != PrefixIndex.End) {
      val live = t.liveLocation(cursor)
      if (live == Absent || live == loc) {
        throw new IllegalStateException(s"prefix index anchors a retired record of segment ${seg.start}")
      }
      index.setAnchor(e, anchorOf(seg, live))
    }
  }

  /** Points the index entries of a compacted segment at its new records: all entries are found
   *  first, while every anchor of the segment still points into the `old` table. */
  private def reanchor(seg: Segment, old: RowTable): Unit = {
    val t = seg.table
    val entries = new Array[Int](t.size)
    val locations = new Array[Long](t.size)
    var n = 0
    t.foreachLocation { loc =>
      t.pointKey(cursor, loc)
      entries(n) = indexFind(seg, old, cursor, prefixHash(cursor)).toInt
      locations(n) = loc
      n += 1
    }
    var i = 0
    while (i < n) {
      index.setAnchor(entries(i), anchorOf(seg, locations(i)))
      i += 1
    }
  }
}

private[sluice] object SegmentedStateMap {

  /** Segment id of keys without a window. */
  val NoWindow: Long = Long.MinValue
  val Absent: Long = RowTable.Absent

  /** The change-log location of a segment that expiry dropped. */
  val Dropped: Long = -3L
  val SegmentOverhead = 256L
  private val RecentSlots = 1024
  private val MinCompactionBudget = 1L << 20

  @inline private def anchorOf(seg: Segment, loc: Long): Long = seg.id.toLong << 32 | loc
  @inline private def segmentIdOf(anchor: Long): Int = (anchor >>> 32).toInt
  @inline private def locationOf(anchor: Long): Long = anchor & 0xffffffffL
}
