package sluice.cache

import java.util.{LinkedHashMap => JLinkedHashMap}

import org.apache.spark.sql.catalyst.expressions.UnsafeRow

/** A cached state row of one column family. Keys compare by their bytes (UnsafeRow equality). */
final case class CacheKey(colFamily: String, key: UnsafeRow)

/**
 * The value side of a cache entry: `value == null` is a tombstone (the key is known to be absent or
 * was removed). `dirty` entries hold a write the delegate has not seen yet.
 */
final class CacheEntry(val value: UnsafeRow, var dirty: Boolean, val sizeBytes: Long)

/** Where dirty entries go: the delegate store. `value == null` means remove. */
trait DirtyWriter {
  def write(key: CacheKey, value: UnsafeRow): Unit
}

/**
 * A byte-bounded LRU cache of state rows (Kafka Streams' NamedCache, KIP-63), owned by one state
 * store provider. Every operation is synchronized: the owning task is the only writer, but a
 * cache-wide trim (see [[RecordCaches]]) may drop clean entries from another thread.
 *
 * Writes are coalesced: a key written many times holds one dirty entry; only [[flush]] (before the
 * delegate's commit) or evicting it (write-through, then drop) sends it to the delegate.
 */
final class RecordCache {
  // access-ordered: iteration starts at the least recently used entry
  private val map = new JLinkedHashMap[CacheKey, CacheEntry](64, 0.75f, true)
  private var bytes = 0L
  private var dirtyCount = 0

  // Cumulative counters; stores report the difference over their lifetime.
  @volatile var hits = 0L
  @volatile var misses = 0L
  @volatile var evictions = 0L
  @volatile var flushes = 0L
  @volatile var delegateWrites = 0L
  @volatile var delegateReads = 0L // point reads the owner passed on to the delegate

  def sizeBytes: Long = synchronized(bytes)
  def numEntries: Int = synchronized(map.size)
  def numDirty: Int = synchronized(dirtyCount)

  /** The entry for `key` (a hit, refreshing its recency) or None (a miss). */
  def get(key: CacheKey): Option[CacheEntry] = synchronized {
    val e = map.get(key)
    if (e == null) { misses += 1; None } else { hits += 1; Some(e) }
  }

  /** Caches a value read from the delegate (clean). Rows must already be copies the cache owns. */
  def putClean(key: CacheKey, value: UnsafeRow, capacity: Long, writer: DirtyWriter): Unit =
    synchronized { insert(key, value, dirty = false, capacity, writer) }

  /** Records a write (`value == null`: a remove) to reach the delegate later. Rows must be copies. */
  def putDirty(key: CacheKey, value: UnsafeRow, capacity: Long, writer: DirtyWriter): Unit =
    synchronized { insert(key, value, dirty = true, capacity, writer) }

  private def insert(key: CacheKey, value: UnsafeRow, dirty: Boolean, capacity: Long,
      writer: DirtyWriter): Unit = {
    val size = RecordCache.entrySize(key, value)
    val old = map.remove(key)
    if (old != null) {
      bytes -= old.sizeBytes
      if (old.dirty) dirtyCount -= 1
    }
    if (size > capacity) {
      // Cannot be held at all: a write goes straight through, a read is simply not cached.
      if (dirty) writeThrough(key, value, writer)
    } else {
      map.put(key, new CacheEntry(value, dirty, size))
      bytes += size
      if (dirty) dirtyCount += 1
      evictDownTo(capacity, writer)
    }
  }

  /** Evicts least recently used entries until the cache holds at most `capacity` bytes. */
  def evictDownTo(capacity: Long, writer: DirtyWriter): Unit = synchronized {
    val it = map.entrySet().iterator()
    while (bytes > capacity && it.hasNext) {
      val e = it.next()
      val entry = e.getValue
      if (entry.dirty) {
        // Kafka's rule: a dirty entry is written to the store before it leaves the cache.
        writeThrough(e.getKey, entry.value, writer)
        dirtyCount -= 1
      }
      it.remove()
      bytes -= entry.sizeBytes
      evictions += 1
    }
  }

  /** Writes every dirty entry to the delegate, least recently used first, and marks them clean. */
  def flush(writer: DirtyWriter): Unit = synchronized {
    if (dirtyCount > 0) {
      val it = map.entrySet().iterator()
      while (it.hasNext) {
        val e = it.next()
        val entry = e.getValue
        if (entry.dirty) {
          writeThrough(e.getKey, entry.value, writer)
          entry.dirty = false
        }
      }
      dirtyCount = 0
      flushes += 1
    }
  }

  /** Drops every entry of one column family, dirty ones included (the family is being removed). */
  def dropColumnFamily(colFamily: String): Unit = synchronized {
    val it = map.entrySet().iterator()
    while (it.hasNext) {
      val e = it.next()
      if (e.getKey.colFamily == colFamily) {
        bytes -= e.getValue.sizeBytes
        if (e.getValue.dirty) dirtyCount -= 1
        it.remove()
      }
    }
  }

  /** Drops least recently used clean entries until `target` bytes remain; dirty ones stay. */
  def dropClean(target: Long): Unit = synchronized {
    val it = map.entrySet().iterator()
    while (bytes > target && it.hasNext) {
      val entry = it.next().getValue
      if (!entry.dirty) {
        it.remove()
        bytes -= entry.sizeBytes
        evictions += 1
      }
    }
  }

  /** Forgets everything, dirty entries included (their writes are being aborted). */
  def clear(): Unit = synchronized {
    map.clear()
    bytes = 0
    dirtyCount = 0
  }

  /** Keys in eviction order (least recently used first), for tests. */
  def keysInLruOrder: Seq[CacheKey] = synchronized {
    val b = Seq.newBuilder[CacheKey]
    map.keySet().forEach(k => b += k)
    b.result()
  }

  private def writeThrough(key: CacheKey, value: UnsafeRow, writer: DirtyWriter): Unit = {
    writer.write(key, value)
    delegateWrites += 1
  }
}

object RecordCache {
  /** Per-entry bookkeeping (map node, entry object, row headers), as Kafka adds a fixed overhead. */
  val EntryOverheadBytes = 96L

  def entrySize(key: CacheKey, value: UnsafeRow): Long =
    key.key.getSizeInBytes.toLong + (if (value == null) 0 else value.getSizeInBytes) + EntryOverheadBytes
}
