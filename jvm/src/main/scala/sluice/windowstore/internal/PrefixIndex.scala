package sluice.windowstore.internal

/**
 * The window store's keys by the hash of their prefix (the first `numColsPrefixKey` columns), for
 * prefix scans, as primitive arrays: no object per key. Entry e is
 *  - `anchor(e)`: a segment id and the location of a record of the key in that segment's table
 *    (`segment << 32 | location`, see [[SegmentedStateMap]]), any of the key's records not yet
 *    written over: their key bytes are the same, so an overwrite leaves the entry alone, and the
 *    map moves it before a put reuses the record it anchors;
 *  - `hash(e)`: the prefix's hash, so that a resize never reads a key and a walk skips other
 *    prefixes without reading theirs;
 *  - `next(e)`: the next entry of its bucket's chain (separate chaining), or of the free list.
 * Entries live in fixed-size blocks, so that growing allocates one block and copies nothing, and
 * heap held stays within a block of the entries in use. The index knows nothing of keys: the
 * map walks a chain ([[head]], [[next]]), decides which entry is a key's, and unlinks it.
 *
 * Single writer, like the map; a walk must not interleave with [[add]] or [[unlink]].
 */
private[sluice] final class PrefixIndex {
  import PrefixIndex._

  private var anchors = new Array[Array[Long]](0)
  private var hashes = new Array[Array[Int]](0)
  private var nexts = new Array[Array[Int]](0)

  /** Entries handed out at least once (in use or free), and the free list through `next`. */
  private var allocated = 0
  private var free = End
  private var _size = 0

  /** First entry of each bucket's chain; a power of two, at least half the entries. */
  private var buckets = newBuckets(MinBuckets)

  def size: Int = _size

  /** Heap held: the entry blocks and the bucket array. */
  def memoryBytes: Long = anchors.length.toLong * BlockSize * (8 + 4 + 4) + buckets.length * 4L

  def head(hash: Int): Int = buckets(bucketOf(hash, buckets.length))
  def next(e: Int): Int = nexts(e >>> BlockBits)(e & BlockMask)
  def hashOf(e: Int): Int = hashes(e >>> BlockBits)(e & BlockMask)
  def anchorOf(e: Int): Long = anchors(e >>> BlockBits)(e & BlockMask)
  def setAnchor(e: Int, anchor: Long): Unit = anchors(e >>> BlockBits)(e & BlockMask) = anchor

  def add(hash: Int, anchor: Long): Unit = {
    val e = if (free != End) { val f = free; free = next(f); f }
    else newEntry()
    anchors(e >>> BlockBits)(e & BlockMask) = anchor
    hashes(e >>> BlockBits)(e & BlockMask) = hash
    val b = bucketOf(hash, buckets.length)
    setNext(e, buckets(b))
    buckets(b) = e
    _size += 1
    if (_size > buckets.length * MaxChain) resize(buckets.length * 2)
  }

  /** Takes entry `e` out of its chain: `prev` is the entry before it in the walk from
   *  [[head]]`(hash)`, or [[End]] if `e` is the head. */
  def unlink(hash: Int, prev: Int, e: Int): Unit = {
    if (prev == End) buckets(bucketOf(hash, buckets.length)) = next(e)
    else setNext(prev, next(e))
    setNext(e, free)
    free = e
    _size -= 1
  }

  def clear(): Unit = {
    anchors = new Array[Array[Long]](0)
    hashes = new Array[Array[Int]](0)
    nexts = new Array[Array[Int]](0)
    allocated = 0
    free = End
    _size = 0
    buckets = newBuckets(MinBuckets)
  }

  private def setNext(e: Int, n: Int): Unit = nexts(e >>> BlockBits)(e & BlockMask) = n

  private def newEntry(): Int = {
    if (allocated == anchors.length * BlockSize) {
      if (anchors.length == MaxBlocks) throw new IllegalStateException("prefix index is full")
      anchors = java.util.Arrays.copyOf(anchors, anchors.length + 1)
      anchors(anchors.length - 1) = new Array[Long](BlockSize)
      hashes = java.util.Arrays.copyOf(hashes, hashes.length + 1)
      hashes(hashes.length - 1) = new Array[Int](BlockSize)
      nexts = java.util.Arrays.copyOf(nexts, nexts.length + 1)
      nexts(nexts.length - 1) = new Array[Int](BlockSize)
    }
    allocated += 1
    allocated - 1
  }

  /** Rebuilds the chains over `n` buckets from the stored hashes. */
  private def resize(n: Int): Unit = {
    val old = buckets
    buckets = newBuckets(n)
    var b = 0
    while (b < old.length) {
      var e = old(b)
      while (e != End) {
        val after = next(e)
        val nb = bucketOf(hashOf(e), n)
        setNext(e, buckets(nb))
        buckets(nb) = e
        e = after
      }
      b += 1
    }
  }
}

private[sluice] object PrefixIndex {

  /** No entry: the end of a chain. */
  val End: Int = -1

  /** 8192 entries: blocks of 64 KiB and 32 KiB, far below G1's humongous size. */
  private val BlockBits = 13
  private val BlockSize = 1 << BlockBits
  private val BlockMask = BlockSize - 1
  private val MaxBlocks = Int.MaxValue / BlockSize
  private val MinBuckets = 16

  /** Entries per bucket on average before the buckets double: a chain walk reads only hashes
   *  and links of the few entries in it, and buckets cost 2-4 bytes per entry. */
  private val MaxChain = 2

  private def newBuckets(n: Int): Array[Int] = { val a = new Array[Int](n); java.util.Arrays.fill(a, End); a }

  /** Murmur3's low bits are well mixed already; folding the high bits in costs nothing. */
  @inline private def bucketOf(hash: Int, n: Int): Int = (hash ^ (hash >>> 16)) & (n - 1)
}
