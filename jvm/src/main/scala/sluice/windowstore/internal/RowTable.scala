package sluice.windowstore.internal

import java.io.{EOFException, InputStream, IOException, OutputStream}

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.unsafe.Platform
import org.apache.spark.unsafe.array.ByteArrayMethods

/**
 * A hash table of UnsafeRow keys to UnsafeRow values whose entries are records appended to byte
 * pages, indexed by open addressing over primitive slots, each a key's hash and its location in
 * one long: a probe touches one cache line before it reads a record. Slots are kept in chunks of
 * at most 256 KiB: G1 gives an array of half a region or more whole regions of its own, so one
 * slot array of 1-4 MiB would hold up to twice its size.
 *
 * Why not a java.util map: an in-heap store keeps every entry alive for many batches, and with a
 * map each entry is four or five objects the garbage collector must copy and trace; here an entry
 * is a few bytes in a page. A location is `page << 15 | offset / 8`, below 2^31 (records are
 * 8-byte aligned and pages at most 256 KiB, or one record), so that a slot holds it with the hash
 * and the window store's prefix index with a segment id; a record is
 * `[key size: int][value size: int][key bytes][value bytes]`.
 *
 * An overwrite or a remove only repoints or clears the slot, leaving the old record as garbage:
 * an open version can be undone from the locations it replaced, and rows handed out stay valid.
 * The owner hands garbage back with [[retire]] once no version can need it (after the version
 * that replaced it commits, or the version that wrote it rolls back); a later put of the same
 * record size then writes over it instead of appending, so steady overwrites of same-size rows
 * hold at most a version's worth of garbage. Other garbage waits for [[compacted]], which copies
 * the live records into new pages. A frozen view reads records it does not own: records retired
 * while one is open are held back until no view is open (see [[freeze]]).
 *
 * Single writer. [[entries]] hands out records in location order, which is the pages' order: a
 * scan reads memory forward instead of jumping to a random record per slot (a window's final
 * results are read by such a scan, millions of entries at once). Changes made while it runs (Spark's
 * operators remove the entry just handed out) are told to it, see [[entries]].
 */
private[sluice] final class RowTable(keyFields: Int, valueFields: Int) {
  import RowTable._

  /** Slot i, `slots(i >>> ChunkBits)(i & ChunkMask)`, is `hash << 32 | location`, or [[Empty]] /
   *  [[Tombstone]] (see [[locOf]]); all chunks have the same length. */
  private var slots = emptySlots(InitialSlots)

  /** Live entries, and slots not empty (live entries plus tombstones). */
  private var live = 0
  private var occupied = 0

  private var pages = new Array[Array[Byte]](0)
  private var page: Array[Byte] = null
  private var pageUsed = 0
  private var pageBytes = 0L
  private var _liveBytes = 0L
  private var _lastWritten = Absent
  private var _lastReplacedBytes = 0

  /** True while a frozen view reads `slots`: the next change copies them first. */
  private var shared = false

  /** Frozen views not yet released: they may read any record live when they were taken. */
  private val openViews = new java.util.concurrent.atomic.AtomicInteger()

  /** Retired records by size: `reusable(size / 8)`, for sizes up to [[MaxReusedRecord]]; grown
   *  to the largest size retired, so a table that never retires holds no array. */
  private var reusable = new Array[LocationStack](0)

  /** Records retired while a view was open, reusable once none is. */
  private val held = new LocationStack

  /** Heap held by the stacks' arrays. */
  private var stackBytes = 0L

  /** Iterators of [[entries]] still running and told of changes; see [[endIterations]]. */
  private var running: List[InLocationOrder] = Nil
  private var iterationEpoch = 0

  /** Rehashes so far: slot indexes an iteration noted are valid while this has not moved. */
  private var rehashes = 0

  /** Location of the record the last put appended (the change log keeps it). */
  def lastWritten: Long = _lastWritten

  /** Size of the record the last put or remove replaced (for [[retire]], which then need not read
   *  it again: by then it is usually out of the CPU's caches). */
  def lastReplacedBytes: Int = _lastReplacedBytes

  def size: Int = live

  /** Bytes of the live records. */
  def liveBytes: Long = _liveBytes

  /** Heap held: pages (live records and garbage), the slot array and the retired records' stacks. */
  def memoryBytes: Long = pageBytes + capacity * 8L + stackBytes + reusable.length * 8L
  def isEmpty: Boolean = live == 0

  def get(key: UnsafeRow): UnsafeRow = {
    val slot = find(key, key.hashCode())
    if (slot < 0) null else valueAt(locOf(slotAt(slots, slot)))
  }

  /** Appends the entry and points the key at it; returns the replaced location or [[Absent]]. */
  def put(key: UnsafeRow, value: UnsafeRow): Long = {
    own()
    val hash = key.hashCode()
    val slot = find(key, hash)
    val loc = write(key, value)
    _lastWritten = loc
    if (slot >= 0) {
      val prev = locOf(slotAt(slots, slot))
      setSlot(slots, slot, slotOf(hash, loc))
      _lastReplacedBytes = recordBytes(prev).toInt
      _liveBytes += recordBytes(loc) - _lastReplacedBytes
      if (running ne Nil) running.foreach(_.replaced(prev, loc))
      prev
    } else {
      insert(-slot - 1, hash, loc)
      Absent
    }
  }

  /** Clears the key's slot; returns the removed location or [[Absent]]. */
  def remove(key: UnsafeRow): Long = {
    own()
    // The entry an iteration just handed out (Spark's eviction removes each as it gets it): its
    // slot is known, so the remove writes the slot without reading it, hashing or comparing.
    val it = handedOut(key)
    val slot = if (it != null) it.lastSlot else find(key, key.hashCode())
    if (slot < 0) Absent
    else {
      val prev = if (it != null) it.lastLoc else locOf(slotAt(slots, slot))
      setSlot(slots, slot, Tombstone)
      live -= 1
      _lastReplacedBytes = recordBytes(prev).toInt
      _liveBytes -= _lastReplacedBytes
      if (running ne Nil) running.foreach(_.replaced(prev, Absent))
      prev
    }
  }

  /** Points the key of the record at `keyLoc` back at `loc` (or removes it for [[Absent]]):
   *  how a rollback undoes a put or a remove without copying anything. */
  def restore(keyLoc: Long, loc: Long): Unit = {
    own()
    endIterations() // a rollback: no iteration of the version goes on
    val key = keyAt(keyLoc)
    if (loc == Absent) remove(key)
    else {
      val hash = key.hashCode()
      val slot = find(key, hash)
      if (slot >= 0) {
        _liveBytes += recordBytes(loc) - recordBytes(locOf(slotAt(slots, slot)))
        setSlot(slots, slot, slotOf(hash, loc))
      } else insert(-slot - 1, hash, loc)
    }
  }

  /** The location of the key's record, or [[Absent]]. */
  def liveLocation(key: UnsafeRow): Long = {
    val slot = find(key, key.hashCode())
    if (slot < 0) Absent else locOf(slotAt(slots, slot))
  }

  /** The retired record the next put of this key and value will write over, or [[Absent]] if it
   *  will append: the owner moves anything of its own that points there first. */
  def reusableFor(key: UnsafeRow, value: UnsafeRow): Long = {
    val stack = reusableOfSize(align(Header + key.getSizeInBytes + value.getSizeInBytes))
    if (stack == null) Absent else stack.top
  }

  /** The retired records of this size, or null if there are none. */
  private def reusableOfSize(size: Int): LocationStack = {
    val c = sizeClass(size)
    if (c < reusable.length && reusable(c) != null && reusable(c).size > 0) reusable(c) else null
  }

  /**
   * Hands back the garbage record at `loc` (no slot points at it) for later puts of its size. The
   * caller guarantees no open version can point a key back at it and no row it handed out for
   * the current version reads it; `maybeViewed` says a frozen view may read it (it was live
   * before the current version), in which case it waits while any view is open. Records too large
   * to reuse wait for compaction.
   */
  def retire(loc: Long, maybeViewed: Boolean): Unit = retire(loc, recordBytes(loc).toInt, maybeViewed)

  /** [[retire]] of a record whose size the caller knows (see [[lastReplacedBytes]]). */
  def retire(loc: Long, size: Int, maybeViewed: Boolean): Unit = {
    if (held.size > 0 && openViews.get() == 0) {
      while (held.size > 0) {
        val h = held.pop()
        addReusable(h, recordBytes(h).toInt)
      }
    }
    if (maybeViewed && openViews.get() > 0) pushTracked(held, loc)
    else addReusable(loc, size)
  }

  private def addReusable(loc: Long, size: Int): Unit = {
    if (size <= MaxReusedRecord) {
      val c = sizeClass(size)
      if (c >= reusable.length) reusable = java.util.Arrays.copyOf(reusable, c + 1)
      if (reusable(c) == null) reusable(c) = new LocationStack
      pushTracked(reusable(c), loc)
    }
  }

  private def pushTracked(stack: LocationStack, loc: Long): Unit = stackBytes += stack.push(loc)

  def keyAt(loc: Long): UnsafeRow = rowAt(pages, loc, keyFields, 0)

  /** Points `row` at the key of the record at `loc` (no allocation). */
  def pointKey(row: UnsafeRow, loc: Long): Unit = {
    val p = pages(pageOf(loc))
    val off = addr(offsetOf(loc))
    row.pointTo(p, off + Header, Platform.getInt(p, off))
  }

  /** Whether the record at `loc` has the key `key`. */
  def keyEqualsAt(key: UnsafeRow, loc: Long): Boolean = keyEquals(key, loc)

  /** Calls `f` with the location of each live entry. */
  def foreachLocation(f: Long => Unit): Unit = {
    val s = slots
    val n = capacityOf(s)
    var i = 0
    while (i < n) {
      val loc = locOf(slotAt(s, i))
      if (loc >= 0) f(loc)
      i += 1
    }
  }
  def valueAt(loc: Long): UnsafeRow = rowAt(pages, loc, valueFields, 1)

  /** The key (part 0) or value (part 1) of the record at `loc`, as a row over the page. */
  private def rowAt(pages: Array[Array[Byte]], loc: Long, fields: Int, part: Int): UnsafeRow = {
    val p = pages(pageOf(loc))
    val off = addr(offsetOf(loc))
    val keySize = Platform.getInt(p, off)
    val row = new UnsafeRow(fields)
    if (part == 0) row.pointTo(p, off + Header, keySize)
    else row.pointTo(p, off + Header + keySize, Platform.getInt(p, off + 4))
    row
  }

  /**
   * The entries as of now, for a reader on another thread (a snapshot written by the maintenance
   * thread) while the writer goes on: pages only grow and the records live now are not written
   * over until the view is released (see [[retire]]), so the view only needs the current slots,
   * which the writer copies before its next change (copy on write, once per frozen table). The
   * caller must hold off the writer during the call itself, and release the view when done.
   */
  def freeze(): RowTable.Frozen = {
    shared = true
    openViews.incrementAndGet()
    new RowTable.Frozen(slots, pages, openViews)
  }

  /** Writes the record at `loc` as stored (see [[RowTable.readRecord]] for the format). */
  def writeRecord(out: OutputStream, loc: Long): Unit = {
    val p = pages(pageOf(loc))
    val off = offsetOf(loc)
    out.write(p, off, Header + Platform.getInt(p, addr(off)) + Platform.getInt(p, addr(off) + 4))
  }

  /** Writes the removal of the key at `loc`: the record with value size -1 and no value. */
  def writeRemoval(out: OutputStream, loc: Long, scratch: Array[Byte]): Unit = {
    val p = pages(pageOf(loc))
    val off = offsetOf(loc)
    val keySize = Platform.getInt(p, addr(off))
    Platform.putInt(scratch, Platform.BYTE_ARRAY_OFFSET, keySize)
    Platform.putInt(scratch, Platform.BYTE_ARRAY_OFFSET + 4, -1)
    out.write(scratch, 0, Header)
    out.write(p, off + Header, keySize)
  }

  private def own(): Unit = if (shared) {
    slots = slots.map(_.clone())
    shared = false
  }

  /**
   * Live entries as (key, value) rows, in location order. Weakly consistent: an entry live when
   * the iteration starts is handed out once, with the value it has when the iteration reaches it,
   * unless it is removed before; entries put later may or may not be. The iteration learns of
   * every overwrite and remove while it runs, so it hands out neither a replaced record nor one
   * twice; the table's owner ends that with [[endIterations]] when a version opens or closes, and
   * an iteration still going then checks each record against the table instead.
   */
  def entries(): Iterator[(UnsafeRow, UnsafeRow)] = {
    val it = new InLocationOrder(liveEntries())
    running = it :: running
    it
  }

  /** Iterations started before no longer hear of changes (see [[entries]]). They look each
   *  remaining key up instead, which is exact as long as no record they have yet to reach is
   *  retired and written over by another key (retiring happens after a version commits). */
  def endIterations(): Unit = if (running ne Nil) {
    running = Nil
    iterationEpoch += 1
  }

  /** The running iteration that last handed out `key` (this very row), if nothing replaced its
   *  record since and no rehash moved its slot; else null. */
  private def handedOut(key: UnsafeRow): InLocationOrder = {
    var l = running
    while (l ne Nil) {
      val it = l.head
      if ((it.lastKey eq key) && it.rehashes == rehashes) return it
      l = l.tail
    }
    null
  }

  /** The live entries as `location << 32 | slot`, by location ascending (a radix sort on the
   *  location, which is below 2^31). */
  private def liveEntries(): Array[Long] = {
    val entries = new Array[Long](live)
    var n = 0
    val count = capacity
    var i = 0
    while (i < count) {
      val loc = locOf(slotAt(slots, i))
      if (loc >= 0) { entries(n) = loc << 32 | i; n += 1 }
      i += 1
    }
    if (n < 256) java.util.Arrays.sort(entries, 0, n)
    else {
      val tmp = new Array[Long](n)
      radixPass(entries, tmp, n, 32)
      radixPass(tmp, entries, n, 48)
    }
    entries
  }

  private final class InLocationOrder(entries: Array[Long]) extends Iterator[(UnsafeRow, UnsafeRow)] {
    private val epoch = iterationEpoch
    val rehashes: Int = RowTable.this.rehashes
    private var pos = 0

    /** Indexes into `entries` whose record was replaced before the iteration reached it. */
    private var gone: java.util.BitSet = null

    /** New records of keys overwritten before the iteration reached them, handed out last. */
    private var moved: Array[Long] = null
    private var movedCount = 0
    private var movedPos = 0
    private var nextLoc = Absent
    private var nextSlot = -1

    /** The row last handed out as a key, its record and slot (see [[handedOut]]). */
    var lastKey: UnsafeRow = null
    var lastLoc: Long = Absent
    var lastSlot: Int = -1

    /** The key's record at `prev` was replaced by `now` ([[Absent]]: removed). */
    def replaced(prev: Long, now: Long): Unit = {
      if (prev == lastLoc) lastKey = null
      // Spark's operators replace the entry just handed out, which lies behind the position.
      if (pos < entries.length && prev >= (entries(pos) >>> 32)) {
        val i = indexOf(prev)
        if (i >= 0) {
          if (gone == null) gone = new java.util.BitSet(entries.length)
          gone.set(i)
          if (now != Absent) addMoved(now)
          return
        }
      }
      var j = movedPos
      while (j < movedCount) {
        if (moved(j) == prev) { moved(j) = now; return }
        j += 1
      }
    }

    /** The index at or after `pos` of the entry at `loc`, or -1. */
    private def indexOf(loc: Long): Int = {
      var lo = pos
      var hi = entries.length - 1
      while (lo <= hi) {
        val mid = (lo + hi) >>> 1
        val at = entries(mid) >>> 32
        if (at < loc) lo = mid + 1 else if (at > loc) hi = mid - 1 else return mid
      }
      -1
    }

    private def addMoved(loc: Long): Unit = {
      if (moved == null) moved = new Array[Long](8)
      else if (movedCount == moved.length) moved = java.util.Arrays.copyOf(moved, movedCount * 2)
      moved(movedCount) = loc
      movedCount += 1
    }

    /** The live record of the key at `loc`: `loc` itself while the iteration is told of changes,
     *  else looked up ([[Absent]] if the key is gone). */
    private def current(loc: Long): Long = if (epoch == iterationEpoch) loc else liveLocation(keyAt(loc))

    private def advance(): Unit = {
      while (nextLoc == Absent && pos < entries.length) {
        if (gone == null || !gone.get(pos)) {
          nextLoc = current(entries(pos) >>> 32)
          nextSlot = if (nextLoc == (entries(pos) >>> 32)) entries(pos).toInt else -1
        }
        pos += 1
      }
      while (nextLoc == Absent && movedPos < movedCount) {
        val loc = moved(movedPos)
        movedPos += 1
        if (loc != Absent) { nextLoc = current(loc); nextSlot = -1 }
      }
      if (nextLoc == Absent && epoch == iterationEpoch) running = running.filterNot(_ eq this)
    }

    // Lazy, so that keys removed after next() returned are not handed out later.
    override def hasNext: Boolean = { if (nextLoc == Absent) advance(); nextLoc != Absent }
    override def next(): (UnsafeRow, UnsafeRow) = {
      if (!hasNext) throw new NoSuchElementException
      val loc = nextLoc
      nextLoc = Absent
      val key = keyAt(loc)
      lastKey = if (nextSlot >= 0 && epoch == iterationEpoch) key else null
      lastLoc = loc
      lastSlot = nextSlot
      (key, valueAt(loc))
    }
  }

  /** Garbage (from overwrites, removes and undone puts) is twice the live records: compaction
   *  then copies half as many bytes as it frees, and memory stays within 3x the live records. */
  def wantsCompaction: Boolean = {
    val garbage = pageBytes - _liveBytes
    garbage >= MinCompactBytes && garbage >= 2 * _liveBytes
  }

  /** The table with only its live records, in fresh pages. Callers swap it in between versions,
   *  when no change log points into the old pages; rows handed out keep the old pages alive.
   *  Records are copied whole and slots placed by their stored hash: no key is hashed or compared. */
  def compacted(): RowTable = {
    val fresh = new RowTable(keyFields, valueFields)
    val n = capacity
    fresh.slots = emptySlots(n)
    val mask = n - 1
    var j = 0
    while (j < n) {
      val s = slotAt(slots, j)
      val loc = locOf(s)
      if (loc >= 0) {
        val size = recordBytes(loc).toInt
        val newLoc = fresh.appendRecord(pages(pageOf(loc)), addr(offsetOf(loc)), size)
        val hash = hashOf(s)
        var i = spread(hash) & mask
        while (slotAt(fresh.slots, i) != Empty) i = (i + 1) & mask
        setSlot(fresh.slots, i, slotOf(hash, newLoc))
        fresh.live += 1
        fresh._liveBytes += size
      }
      j += 1
    }
    fresh.occupied = fresh.live
    fresh
  }

  // ---- slots ----

  /** The index of the key's slot, or -(index of the slot to insert at) - 1. */
  private def find(key: UnsafeRow, hash: Int): Int = {
    val mask = capacity - 1
    var i = spread(hash) & mask
    var firstFree = -1
    while (true) {
      val s = slotAt(slots, i)
      if (s == Empty) return -(if (firstFree >= 0) firstFree else i) - 1
      if (s == Tombstone) {
        if (firstFree < 0) firstFree = i
      } else if (hashOf(s) == hash && keyEquals(key, locOf(s))) {
        return i
      }
      i = (i + 1) & mask
    }
    throw new IllegalStateException("unreachable")
  }

  private def keyEquals(key: UnsafeRow, loc: Long): Boolean = {
    val p = pages(pageOf(loc))
    val off = offsetOf(loc)
    Platform.getInt(p, addr(off)) == key.getSizeInBytes &&
    ByteArrayMethods.arrayEquals(key.getBaseObject, key.getBaseOffset,
      p, addr(off) + Header, key.getSizeInBytes)
  }

  private def insert(i: Int, hash: Int, loc: Long): Unit = {
    if (slotAt(slots, i) == Empty) occupied += 1
    setSlot(slots, i, slotOf(hash, loc))
    live += 1
    _liveBytes += recordBytes(loc)
    if (occupied > capacity * MaxLoad) rehash()
  }

  private def capacity: Int = capacityOf(slots)

  /** A new array (twice the size unless tombstones made most of the load); old iterators keep
   *  the old one. */
  private def rehash(): Unit = {
    val n = if (live > capacity * MaxLoad / 2) capacity * 2 else capacity
    rehashes += 1
    val old = slots
    val oldCapacity = capacityOf(old)
    slots = emptySlots(n)
    val mask = n - 1
    var j = 0
    while (j < oldCapacity) {
      val s = slotAt(old, j)
      if (locOf(s) >= 0) {
        var i = spread(hashOf(s)) & mask
        while (slotAt(slots, i) != Empty) i = (i + 1) & mask
        setSlot(slots, i, s)
      }
      j += 1
    }
    occupied = live
  }

  // ---- pages ----

  /** Writes the record over a retired one of its size if any (see [[reusableFor]]), else appends
   *  it; returns its location. */
  private def write(key: UnsafeRow, value: UnsafeRow): Long = {
    val k = key.getSizeInBytes
    val v = value.getSizeInBytes
    val size = align(Header + k + v)
    val stack = reusableOfSize(size)
    val loc = if (stack != null) stack.pop()
    else {
      val off = reserve(size)
      locationOf(pages.length - 1, off)
    }
    val p = pages(pageOf(loc))
    val at = addr(offsetOf(loc))
    Platform.putInt(p, at, k)
    Platform.putInt(p, at + 4, v)
    Platform.copyMemory(key.getBaseObject, key.getBaseOffset, p, at + Header, k)
    Platform.copyMemory(value.getBaseObject, value.getBaseOffset, p, at + Header + k, v)
    loc
  }

  /** Appends a whole record (header included) copied from another table's page. */
  private def appendRecord(src: Array[Byte], srcAddr: Long, size: Int): Long = {
    val off = reserve(size)
    Platform.copyMemory(src, srcAddr, page, addr(off), size)
    locationOf(pages.length - 1, off)
  }

  /** Room for `size` bytes in the current page (a new page if needed); returns its offset. */
  private def reserve(size: Int): Int = {
    if (page == null || pageUsed + size > page.length) newPage(size)
    val off = pageUsed
    pageUsed += size
    off
  }

  /** Pages double from MinPage to MaxPage, so small segments stay small; a record larger than a
   *  page gets a page of its own size. */
  private def newPage(minSize: Int): Unit = {
    val size = math.max(minSize, math.min(MaxPage, math.max(MinPage, pageBytes)).toInt)
    if (pages.length >= MaxPages) {
      throw new IllegalStateException(s"A window store segment cannot hold more than $MaxPages pages " +
        s"(${MaxPages.toLong * MaxPage >> 30} GiB of records)")
    }
    page = new Array[Byte](size)
    pageUsed = 0
    pageBytes += size
    // Copy on append: iterators keep the array they started on.
    val grown = java.util.Arrays.copyOf(pages, pages.length + 1)
    grown(pages.length) = page
    pages = grown
  }

  private def recordBytes(loc: Long): Long = {
    val p = pages(pageOf(loc))
    val off = offsetOf(loc)
    align(Header + Platform.getInt(p, addr(off)) + Platform.getInt(p, addr(off) + 4))
  }
}

private[sluice] object RowTable {

  /** A table's entries as of [[RowTable.freeze]]. */
  final class Frozen private[RowTable] (slots: Array[Array[Long]], pages: Array[Array[Byte]],
      openViews: java.util.concurrent.atomic.AtomicInteger) {
    private val released = new java.util.concurrent.atomic.AtomicBoolean()

    /** Lets the table write over the records this view reads (idempotent). */
    def release(): Unit = if (released.compareAndSet(false, true)) openViews.decrementAndGet()

    def writeTo(out: OutputStream): Unit = {
      require(!released.get(), "frozen view already released")
      var i = 0
      val n = capacityOf(slots)
      while (i < n) {
        val loc = locOf(slotAt(slots, i))
        if (loc >= 0) {
          val p = pages(pageOf(loc))
          val off = offsetOf(loc)
          out.write(p, off, Header + Platform.getInt(p, addr(off)) + Platform.getInt(p, addr(off) + 4))
        }
        i += 1
      }
    }
  }

  /**
   * Reads one record written by `writeRecord`, `writeRemoval`, `writeClear` or `writeEnd`:
   * `[key size][value size][key bytes][value bytes]`, sizes as 4-byte ints in the platform's byte
   * order (as in UnsafeRow bytes), value size -1 for a removal (no value bytes), key size -2 for
   * a cleared window (then 8 bytes: its start), key size -1 for the end. Calls `put`, `remove` or
   * `clear` with rows over a fresh array; returns false at the end.
   */
  def readRecord(in: InputStream, scratch: Array[Byte], keyFields: Int, valueFields: Int,
      put: (UnsafeRow, UnsafeRow) => Unit, remove: UnsafeRow => Unit, clear: Long => Unit): Boolean = {
    readFully(in, scratch, Header)
    val k = Platform.getInt(scratch, Platform.BYTE_ARRAY_OFFSET)
    val v = Platform.getInt(scratch, Platform.BYTE_ARRAY_OFFSET + 4)
    if (k == -1) false
    else if (k == ClearedWindow) {
      if (v != 8) throw new IOException(s"corrupt record header (cleared window, $v bytes)")
      readFully(in, scratch, 8)
      clear(Platform.getLong(scratch, Platform.BYTE_ARRAY_OFFSET))
      true
    } else {
      if (k < 0 || v < -1) throw new IOException(s"corrupt record header (key size $k, value size $v)")
      val bytes = new Array[Byte](k + math.max(v, 0))
      readFully(in, bytes, bytes.length)
      val key = new UnsafeRow(keyFields)
      key.pointTo(bytes, k)
      if (v < 0) remove(key)
      else {
        val value = new UnsafeRow(valueFields)
        value.pointTo(bytes, Platform.BYTE_ARRAY_OFFSET + k, v)
        put(key, value)
      }
      true
    }
  }

  /** Writes that every entry of the window starting at `start` is gone (scratch: 8 bytes or more). */
  def writeClear(out: OutputStream, start: Long, scratch: Array[Byte]): Unit = {
    Platform.putInt(scratch, Platform.BYTE_ARRAY_OFFSET, ClearedWindow)
    Platform.putInt(scratch, Platform.BYTE_ARRAY_OFFSET + 4, 8)
    out.write(scratch, 0, Header)
    Platform.putLong(scratch, Platform.BYTE_ARRAY_OFFSET, start)
    out.write(scratch, 0, 8)
  }

  def writeEnd(out: OutputStream, scratch: Array[Byte]): Unit = {
    Platform.putInt(scratch, Platform.BYTE_ARRAY_OFFSET, -1)
    Platform.putInt(scratch, Platform.BYTE_ARRAY_OFFSET + 4, -1)
    out.write(scratch, 0, Header)
  }

  private def readFully(in: InputStream, buf: Array[Byte], n: Int): Unit = {
    var read = 0
    while (read < n) {
      val r = in.read(buf, read, n - read)
      if (r < 0) throw new EOFException(s"truncated record: $read of $n bytes")
      read += r
    }
  }

  /** A stack of record locations in one array, which grows and never shrinks. */
  private final class LocationStack {
    private var items = new Array[Long](0)
    var size = 0
    def top: Long = items(size - 1)
    def pop(): Long = { size -= 1; items(size) }

    /** Returns the bytes the array grew by. */
    def push(loc: Long): Long = {
      var grown = 0L
      if (size == items.length) {
        val n = math.max(8, size * 2)
        grown = (n - items.length) * 8L
        items = java.util.Arrays.copyOf(items, n)
      }
      items(size) = loc
      size += 1
      grown
    }
  }

  /** Location of no entry. Real locations are >= 0 and below 2^31. */
  val Absent: Long = -1L

  /** A slot never used (location -1) and a cleared one (location -2). */
  private val Empty = -1L
  private val Tombstone = -2L
  private val Header = 8

  /** The key size that marks a cleared window's record. */
  private val ClearedWindow = -2
  private val InitialSlots = 16
  private val MaxLoad = 0.6
  private val MinPage = 4096

  /** Below half of G1's smallest region (1 MiB): larger arrays are humongous objects, each
   *  taking whole regions of the old generation. */
  private val MaxPage = 256 << 10

  /** Locations are `page << 15 | offset / 8`: offsets below MaxPage, pages below 2^16. */
  private val OffsetBits = 15
  private val MaxPages = 1 << 16
  private val MinCompactBytes = 64L * 1024

  /** Records up to this size (header included) are reused when retired: rows of fixed-width
   *  columns and short strings, which is what overwrites of aggregation and session state write. */
  private val MaxReusedRecord = 4096

  /** Slots per chunk at most: 256 KiB, below half of G1's smallest region (1 MiB). */
  private val ChunkBits = 15
  private val ChunkMask = (1 << ChunkBits) - 1

  /** n empty slots (a power of two): one chunk of n, or chunks of 2^ChunkBits. */
  private def emptySlots(n: Int): Array[Array[Long]] = {
    val chunk = math.min(n, 1 << ChunkBits)
    Array.fill(n / chunk) { val a = new Array[Long](chunk); java.util.Arrays.fill(a, Empty); a }
  }
  @inline private def capacityOf(s: Array[Array[Long]]): Int = s.length * s(0).length
  @inline private def slotAt(s: Array[Array[Long]], i: Int): Long = s(i >>> ChunkBits)(i & ChunkMask)
  @inline private def setSlot(s: Array[Array[Long]], i: Int, v: Long): Unit = s(i >>> ChunkBits)(i & ChunkMask) = v
  @inline private def slotOf(hash: Int, loc: Long): Long = hash.toLong << 32 | loc
  @inline private def hashOf(slot: Long): Int = (slot >>> 32).toInt

  /** A slot's location: >= 0 for an entry, -1 for an empty slot, -2 for a tombstone. */
  @inline private def locOf(slot: Long): Long = slot.toInt.toLong
  @inline private def locationOf(page: Int, off: Int): Long = page.toLong << OffsetBits | (off >>> 3)
  @inline private def pageOf(loc: Long): Int = (loc >>> OffsetBits).toInt
  @inline private def offsetOf(loc: Long): Int = (loc.toInt & ((1 << OffsetBits) - 1)) << 3
  @inline private def addr(off: Int): Long = Platform.BYTE_ARRAY_OFFSET + off
  @inline private def align(n: Int): Int = (n + 7) & ~7
  @inline private def sizeClass(alignedSize: Int): Int = alignedSize >>> 3

  /** One pass of an LSD radix sort: `from`'s first n values into `to`, stably by 16 bits at `shift`. */
  private def radixPass(from: Array[Long], to: Array[Long], n: Int, shift: Int): Unit = {
    val counts = new Array[Int](1 << 16)
    var i = 0
    while (i < n) { counts(((from(i) >>> shift) & 0xffff).toInt) += 1; i += 1 }
    var sum = 0
    i = 0
    while (i < counts.length) { val c = counts(i); counts(i) = sum; sum += c; i += 1 }
    i = 0
    while (i < n) {
      val d = ((from(i) >>> shift) & 0xffff).toInt
      to(counts(d)) = from(i)
      counts(d) += 1
      i += 1
    }
  }

  /** Murmur3's low bits are well mixed already; folding the high bits in costs nothing. */
  @inline private def spread(h: Int): Int = h ^ (h >>> 16)
}
