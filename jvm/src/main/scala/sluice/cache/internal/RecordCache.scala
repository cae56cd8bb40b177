package sluice.cache.internal

import java.util.{LinkedHashMap => JLinkedHashMap}

import org.apache.spark.sql.catalyst.expressions.UnsafeRow

/**
 * A cached state row of one column family of one store (`owner`: the caching provider; entries of
 * all stores a task uses share its slot's cache). Keys compare by their bytes (UnsafeRow equality).
 */
private[sluice] final case class CacheKey(colFamily: String, key: UnsafeRow, owner: AnyRef = CacheKey.NoOwner)

private[sluice] object CacheKey {

  /** Owner of entries not tied to a store (unit tests of the cache alone). */
  val NoOwner: AnyRef = "none"
}

/**
 * The value side of a cache entry: `value == null` is a tombstone (the key is known to be absent or
 * was removed). `dirty` entries hold a write the delegate has not seen yet.
 */
private[sluice] final class CacheEntry(val value: UnsafeRow, var dirty: Boolean, val sizeBytes: Long)

/** Where dirty entries go: the delegate store. `value == null` means remove. */
private[sluice] trait DirtyWriter {
  def write(key: CacheKey, value: UnsafeRow): Unit

  /** The store ended without commit or abort (its task finished): its cached rows are gone. */
  def discarded(): Unit = ()
}

/**
 * A byte-bounded LRU cache of state rows (Kafka Streams' ThreadCache, KIP-63): one per task slot,
 * shared by every store the slot's task opens ([[SlotCaches]]). Every operation is synchronized:
 * only the slot's task writes, but another task may drop a store's clean entries when that store
 * moved to its slot.
 *
 * Writes are coalesced: a key written many times holds one dirty entry; only [[flush]] (before the
 * store's commit) or evicting it (write-through to its own store, then drop) sends it to the delegate.
 * Eviction is least recently used first across all stores of the slot.
 */
private[sluice] final class RecordCache(val pooled: Boolean = false) {
  // access-ordered: iteration starts at the least recently used entry
  private val map = new JLinkedHashMap[CacheKey, CacheEntry](64, 0.75f, true)
  @volatile private var bytes = 0L
  @volatile private var peak = 0L
  private var dirtyCount = 0
  // per store: bytes and dirty entries held, and the open store that takes its evicted dirty rows
  // Its dirty entries in the order they became dirty: a flush touches only its own store's rows.
  private final class Owned {
    var bytes = 0L
    val dirty = new java.util.LinkedHashMap[CacheKey, CacheEntry]()
    var writer: DirtyWriter = null
  }
  private val owners = new java.util.HashMap[AnyRef, Owned]()

  // Cumulative counters of the whole cache.
  @volatile var hits = 0L
  @volatile var misses = 0L
  @volatile var evictions = 0L
  @volatile var flushes = 0L
  @volatile var delegateWrites = 0L

  def sizeBytes: Long = bytes

  /** The largest [[sizeBytes]] after any insert. */
  def peakBytes: Long = peak
  def numEntries: Int = synchronized(map.size)
  def numDirty: Int = synchronized(dirtyCount)
  def ownerBytes(owner: AnyRef): Long = synchronized(Option(owners.get(owner)).map(_.bytes).getOrElse(0L))

  /** `writer` (an open store of `owner`) takes the owner's dirty rows when they are evicted. */
  def attach(owner: AnyRef, writer: DirtyWriter): Unit = synchronized { owned(owner).writer = writer }
  def detach(owner: AnyRef): Unit = synchronized { Option(owners.get(owner)).foreach(_.writer = null) }

  /** Detaches every store still open (the slot's task ended) and returns them. */
  def detachAll(): Seq[DirtyWriter] = synchronized {
    val b = Seq.newBuilder[DirtyWriter]
    owners.values().forEach { o => if (o.writer != null) { b += o.writer; o.writer = null } }
    b.result()
  }

  private def owned(owner: AnyRef): Owned = {
    var o = owners.get(owner)
    if (o == null) { o = new Owned; owners.put(owner, o) }
    o
  }

  /** The entry for `key` (a hit, refreshing its recency) or None (a miss). */
  def get(key: CacheKey): Option[CacheEntry] = synchronized {
    val e = map.get(key)
    if (e == null) { misses += 1; None }
    else { hits += 1; Some(e) }
  }

  /** Caches a value read from the delegate (clean); returns the entries evicted to make room. */
  def putClean(key: CacheKey, value: UnsafeRow, capacity: Long, writer: DirtyWriter): Int =
    synchronized { insert(key, value, dirty = false, capacity, writer) }

  /** Records a write (`value == null`: a remove) to reach the delegate later; returns evictions. */
  def putDirty(key: CacheKey, value: UnsafeRow, capacity: Long, writer: DirtyWriter): Int =
    synchronized { insert(key, value, dirty = true, capacity, writer) }

  private def insert(key: CacheKey, value: UnsafeRow, dirty: Boolean, capacity: Long,
      writer: DirtyWriter): Int = {
    val size = RecordCache.entrySize(key, value)
    val old = map.remove(key)
    if (old != null) account(key, old, -1)
    if (size > capacity) {
      // Cannot be held at all: a write goes straight through, a read is simply not cached.
      if (dirty) writeThrough(key, value, writer)
      0
    } else {
      // Room first, then the entry: the cache never holds more than `capacity`, not even briefly.
      val evicted = evictDownTo(capacity - size)
      val entry = new CacheEntry(value, dirty, size)
      map.put(key, entry)
      account(key, entry, +1)
      if (bytes > peak) peak = bytes
      evicted
    }
  }

  private def account(key: CacheKey, e: CacheEntry, sign: Int): Unit = {
    bytes += sign * e.sizeBytes
    val o = owned(key.owner)
    o.bytes += sign * e.sizeBytes
    if (e.dirty) {
      dirtyCount += sign
      if (sign > 0) o.dirty.put(key, e) else o.dirty.remove(key)
    }
  }

  /**
   * Evicts least recently used entries until at most `capacity` bytes remain; returns how many.
   * A dirty entry goes to its owner's open store, never to another; with none open, fails.
   */
  def evictDownTo(capacity: Long): Int = synchronized {
    var n = 0
    val it = map.entrySet().iterator()
    while (bytes > capacity && it.hasNext) {
      val e = it.next()
      val entry = e.getValue
      if (entry.dirty) {
        // Kafka's rule: a dirty entry is written to its own store before it leaves the cache. Only
        // the owner's open store may take it: written anywhere else it would corrupt that store.
        val own = Option(owners.get(e.getKey.owner)).map(_.writer).orNull
        if (own == null) throw new IllegalStateException(RecordCache.noOwnerMessage(e.getKey))
        writeThrough(e.getKey, entry.value, own)
      }
      it.remove()
      account(e.getKey, entry, -1)
      evictions += 1
      n += 1
    }
    n
  }

  /** Writes every dirty entry of `owner` to `writer` (its open store), oldest write first, and marks them clean. */
  def flush(writer: DirtyWriter, owner: AnyRef = CacheKey.NoOwner): Boolean = synchronized {
    val o = owners.get(owner)
    if (o == null || o.dirty.isEmpty) false
    else {
      o.dirty.forEach { (key, entry) =>
        writeThrough(key, entry.value, writer)
        entry.dirty = false
      }
      dirtyCount -= o.dirty.size
      o.dirty.clear()
      flushes += 1
      true
    }
  }

  /** Drops every entry of one column family of `owner`, dirty ones included (the family is removed). */
  def dropColumnFamily(colFamily: String, owner: AnyRef = CacheKey.NoOwner): Unit =
    dropWhere(k => k.colFamily == colFamily && (k.owner eq owner))

  /** Drops every entry of `owner`, dirty ones included (its version was aborted or is stale). */
  def dropOwner(owner: AnyRef): Unit = synchronized {
    val o = owners.get(owner)
    if (o != null && o.bytes > 0) dropWhere(_.owner eq owner)
    if (o != null && o.writer == null) owners.remove(owner)
  }

  private def dropWhere(p: CacheKey => Boolean): Unit = synchronized {
    val it = map.entrySet().iterator()
    while (it.hasNext) {
      val e = it.next()
      if (p(e.getKey)) {
        account(e.getKey, e.getValue, -1)
        it.remove()
      }
    }
  }

  private def writeThrough(key: CacheKey, value: UnsafeRow, writer: DirtyWriter): Unit = {
    writer.write(key, value)
    delegateWrites += 1
  }
}

private[sluice] object RecordCache {

  /** Per-entry bookkeeping (map node, entry object, row headers), as Kafka adds a fixed overhead. */
  val EntryOverheadBytes = 96L

  def noOwnerMessage(key: CacheKey): String =
    s"sluice record cache: a pending write of state store ${key.owner} (column family '${key.colFamily}') " +
      "must leave the cache, but that store is not open to take it; failing the task rather than writing it " +
      "to another store (the batch will be retried from its last committed version)"

  def entrySize(key: CacheKey, value: UnsafeRow): Long =
    key.key.getSizeInBytes.toLong + (if (value == null) 0 else value.getSizeInBytes) + EntryOverheadBytes
}
