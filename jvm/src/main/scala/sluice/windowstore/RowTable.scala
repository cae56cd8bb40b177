package sluice.windowstore

import java.io.{EOFException, InputStream, IOException, OutputStream}

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.unsafe.Platform
import org.apache.spark.unsafe.array.ByteArrayMethods

/**
 * A hash table of UnsafeRow keys to UnsafeRow values whose entries are records appended to byte
 * pages, indexed by open addressing over one primitive array of (hash, location) pairs: a probe
 * touches one cache line before it reads a record.
 *
 * Why not a java.util map: an in-heap store keeps every entry alive for many batches, and with a
 * map each entry is four or five objects the garbage collector must copy and trace; here an entry
 * is a few bytes in a page. A location is `page << 32 | offset`; a record is
 * `[key size: int][value size: int][key bytes][value bytes]`, 8-byte aligned.
 *
 * Record bytes are never changed once written: an overwrite or a remove only repoints or clears
 * the slot, leaving the old record as garbage until [[compacted]] copies the live records into
 * new pages. Rows handed out therefore stay valid for as long as the caller holds them, and an
 * open version can be undone from the locations it replaced.
 *
 * Single writer. An iterator taken before a rehash keeps reading the slots it started on and
 * re-checks each entry against the current table, so removes during iteration (as Spark's
 * operators do) are seen.
 */
private[windowstore] final class RowTable(keyFields: Int, valueFields: Int) {
  import RowTable._

  /** slots(2i) is slot i's key hash, slots(2i + 1) its location. */
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
  /** True while a frozen view reads `slots`: the next change copies them first. */
  private var shared = false

  /** Location of the record the last put appended (the change log keeps it). */
  def lastWritten: Long = _lastWritten

  def size: Int = live
  /** Bytes of the live records. */
  def liveBytes: Long = _liveBytes
  /** Heap held: pages (live records and garbage) and the slot arrays. */
  def memoryBytes: Long = pageBytes + slots.length * 8L
  def isEmpty: Boolean = live == 0

  def get(key: UnsafeRow): UnsafeRow = {
    val slot = find(key, key.hashCode())
    if (slot < 0) null else valueAt(slots(slot + 1))
  }

  /** Appends the entry and points the key at it; returns the replaced location or [[Absent]]. */
  def put(key: UnsafeRow, value: UnsafeRow): Long = {
    own()
    val hash = key.hashCode()
    val slot = find(key, hash)
    val loc = append(key, value)
    _lastWritten = loc
    if (slot >= 0) {
      val prev = slots(slot + 1)
      slots(slot + 1) = loc
      _liveBytes += recordBytes(loc) - recordBytes(prev)
      prev
    } else {
      insert(-slot - 1, hash, loc)
      Absent
    }
  }

  /** Clears the key's slot; returns the removed location or [[Absent]]. */
  def remove(key: UnsafeRow): Long = {
    own()
    val slot = find(key, key.hashCode())
    if (slot < 0) Absent
    else {
      val prev = slots(slot + 1)
      slots(slot + 1) = Tombstone
      live -= 1
      _liveBytes -= recordBytes(prev)
      prev
    }
  }

  /** Points the key of the record at `keyLoc` back at `loc` (or removes it for [[Absent]]):
   *  how a rollback undoes a put or a remove without copying anything. */
  def restore(keyLoc: Long, loc: Long): Unit = {
    own()
    val key = keyAt(keyLoc)
    if (loc == Absent) remove(key)
    else {
      val hash = key.hashCode()
      val slot = find(key, hash)
      if (slot >= 0) {
        _liveBytes += recordBytes(loc) - recordBytes(slots(slot + 1))
        slots(slot + 1) = loc
      } else insert(-slot - 1, hash, loc)
    }
  }

  def keyAt(loc: Long): UnsafeRow = rowAt(pages, loc, keyFields, 0)
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
   * thread) while the writer goes on: record bytes never change and pages only grow, so the view
   * only needs the current slots, which the writer copies before its next change (copy on write,
   * once per frozen table). The caller must hold off the writer during the call itself.
   */
  def freeze(): RowTable.Frozen = {
    shared = true
    new RowTable.Frozen(slots, pages)
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
    slots = slots.clone()
    shared = false
  }

  /** Live entries as (key, value) rows, weakly consistent (see the class doc). */
  def entries(): Iterator[(UnsafeRow, UnsafeRow)] = new Iterator[(UnsafeRow, UnsafeRow)] {
    // A table's pages only grow (compaction builds a new table), so current pages cover them.
    private val start = slots
    private var i = 0
    private var nextKey: UnsafeRow = _
    private var nextValue: UnsafeRow = _

    private def advance(): Unit = {
      nextKey = null
      while (nextKey == null && i < start.length) {
        val loc = start(i + 1)
        i += 2
        if (loc >= 0) {
          if (start eq slots) {
            nextKey = keyAt(loc)
            nextValue = valueAt(loc)
          } else {
            // The table was rehashed since: its current state decides.
            val key = keyAt(loc)
            val value = get(key)
            if (value != null) { nextKey = key; nextValue = value }
          }
        }
      }
    }
    // Lazy, so that keys removed after next() returned are not handed out later.
    override def hasNext: Boolean = { if (nextKey == null) advance(); nextKey != null }
    override def next(): (UnsafeRow, UnsafeRow) = {
      if (!hasNext) throw new NoSuchElementException
      val r = (nextKey, nextValue)
      nextKey = null
      r
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
    fresh.slots = emptySlots(capacity)
    val mask = fresh.slots.length - 1
    var j = 0
    while (j < slots.length) {
      val loc = slots(j + 1)
      if (loc >= 0) {
        val size = recordBytes(loc).toInt
        val newLoc = fresh.appendRecord(pages(pageOf(loc)), addr(offsetOf(loc)), size)
        val hash = slots(j).toInt
        var i = (spread(hash) << 1) & mask
        while (fresh.slots(i + 1) != Absent) i = (i + 2) & mask
        fresh.slots(i) = hash
        fresh.slots(i + 1) = newLoc
        fresh.live += 1
        fresh._liveBytes += size
      }
      j += 2
    }
    fresh.occupied = fresh.live
    fresh
  }

  // ---- slots ----

  /** The index in `slots` of the key's pair, or -(index of the pair to insert at) - 1. */
  private def find(key: UnsafeRow, hash: Int): Int = {
    val mask = slots.length - 1
    var i = (spread(hash) << 1) & mask
    var firstFree = -1
    while (true) {
      val loc = slots(i + 1)
      if (loc == Absent) return -(if (firstFree >= 0) firstFree else i) - 1
      if (loc == Tombstone) {
        if (firstFree < 0) firstFree = i
      } else if (slots(i).toInt == hash && keyEquals(key, loc)) {
        return i
      }
      i = (i + 2) & mask
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
    if (slots(i + 1) == Absent) occupied += 1
    slots(i) = hash
    slots(i + 1) = loc
    live += 1
    _liveBytes += recordBytes(loc)
    if (occupied > capacity * MaxLoad) rehash()
  }

  private def capacity: Int = slots.length / 2

  /** A new array (twice the size unless tombstones made most of the load); old iterators keep
   *  the old one. */
  private def rehash(): Unit = {
    val n = if (live > capacity * MaxLoad / 2) capacity * 2 else capacity
    val old = slots
    slots = emptySlots(n)
    val mask = slots.length - 1
    var j = 0
    while (j < old.length) {
      val loc = old(j + 1)
      if (loc >= 0) {
        val hash = old(j).toInt
        var i = (spread(hash) << 1) & mask
        while (slots(i + 1) != Absent) i = (i + 2) & mask
        slots(i) = hash
        slots(i + 1) = loc
      }
      j += 2
    }
    occupied = live
  }

  // ---- pages ----

  private def append(key: UnsafeRow, value: UnsafeRow): Long = {
    val k = key.getSizeInBytes
    val v = value.getSizeInBytes
    val off = reserve(align(Header + k + v))
    Platform.putInt(page, addr(off), k)
    Platform.putInt(page, addr(off) + 4, v)
    Platform.copyMemory(key.getBaseObject, key.getBaseOffset, page, addr(off) + Header, k)
    Platform.copyMemory(value.getBaseObject, value.getBaseOffset, page, addr(off) + Header + k, v)
    (pages.length - 1).toLong << 32 | off
  }

  /** Appends a whole record (header included) copied from another table's page. */
  private def appendRecord(src: Array[Byte], srcAddr: Long, size: Int): Long = {
    val off = reserve(size)
    Platform.copyMemory(src, srcAddr, page, addr(off), size)
    (pages.length - 1).toLong << 32 | off
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

private[windowstore] object RowTable {
  /** A table's entries as of [[RowTable.freeze]]. */
  final class Frozen private[RowTable] (slots: Array[Long], pages: Array[Array[Byte]]) {
    def writeTo(out: OutputStream): Unit = {
      var i = 0
      while (i < slots.length) {
        val loc = slots(i + 1)
        if (loc >= 0) {
          val p = pages(pageOf(loc))
          val off = offsetOf(loc)
          out.write(p, off, Header + Platform.getInt(p, addr(off)) + Platform.getInt(p, addr(off) + 4))
        }
        i += 2
      }
    }
  }

  /**
   * Reads one record written by `writeRecord`, `writeRemoval` or `writeEnd`:
   * `[key size][value size][key bytes][value bytes]`, sizes as 4-byte ints in the platform's byte
   * order (as in UnsafeRow bytes), value size -1 for a removal (no value bytes), key size -1 for
   * the end. Calls `put` or `remove` with rows over a fresh array; returns false at the end.
   */
  def readRecord(in: InputStream, scratch: Array[Byte], keyFields: Int, valueFields: Int,
      put: (UnsafeRow, UnsafeRow) => Unit, remove: UnsafeRow => Unit): Boolean = {
    readFully(in, scratch, Header)
    val k = Platform.getInt(scratch, Platform.BYTE_ARRAY_OFFSET)
    val v = Platform.getInt(scratch, Platform.BYTE_ARRAY_OFFSET + 4)
    if (k == -1) false
    else {
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

  /** Location of no entry; a cleared slot. Real locations are >= 0. */
  val Absent: Long = -1L
  private val Tombstone = -2L
  private val Header = 8
  private val InitialSlots = 16
  private val MaxLoad = 0.6
  private val MinPage = 4096
  /** Below half of G1's smallest region (1 MiB): larger arrays are humongous objects, each
   *  taking whole regions of the old generation. */
  private val MaxPage = 256 << 10
  private val MinCompactBytes = 64L * 1024

  /** n (hash, location) pairs, all absent. */
  private def emptySlots(n: Int): Array[Long] = { val a = new Array[Long](2 * n); java.util.Arrays.fill(a, Absent); a }
  @inline private def pageOf(loc: Long): Int = (loc >>> 32).toInt
  @inline private def offsetOf(loc: Long): Int = loc.toInt
  @inline private def addr(off: Int): Long = Platform.BYTE_ARRAY_OFFSET + off
  @inline private def align(n: Int): Int = (n + 7) & ~7
  /** Murmur3's low bits are well mixed already; folding the high bits in costs nothing. */
  @inline private def spread(h: Int): Int = h ^ (h >>> 16)
}
