package sluice.cache.internal

import scala.collection.mutable.ArrayBuffer

import org.apache.spark.sql.catalyst.expressions.{UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.types.{LongType, StructField, StructType}
import org.scalatest.funsuite.AnyFunSuite

class RecordCacheSuite extends AnyFunSuite {
  private val proj = UnsafeProjection.create(StructType(Seq(StructField("x", LongType))))
  private def row(x: Long): UnsafeRow =
    proj(org.apache.spark.sql.catalyst.InternalRow(x)).copy()
  private def key(x: Long) = CacheKey("default", row(x))
  private val entry = RecordCache.entrySize(key(0), row(0)) // every entry here has this size

  /** Records what reaches the delegate, in order. */
  private class Log extends DirtyWriter {
    val writes = ArrayBuffer.empty[(Long, Option[Long])]
    override def write(k: CacheKey, v: UnsafeRow): Unit =
      writes += ((k.key.getLong(0), Option(v).map(_.getLong(0))))
  }

  test("reads hit after a fill and miss before it") {
    val c = new RecordCache
    val log = new Log
    assert(c.get(key(1)).isEmpty)
    c.putClean(key(1), row(10), 10 * entry, log)
    assert(c.get(key(1)).map(_.value.getLong(0)).contains(10L))
    assert((c.hits, c.misses) == ((1L, 1L)))
    assert(log.writes.isEmpty && c.numDirty == 0)
  }

  test("writes are coalesced: a key written many times reaches the delegate once, at flush") {
    val c = new RecordCache
    val log = new Log
    (1 to 5).foreach(i => c.putDirty(key(1), row(i), 10 * entry, log))
    c.putDirty(key(2), row(7), 10 * entry, log)
    c.putDirty(key(2), null, 10 * entry, log) // removed after being written
    assert(log.writes.isEmpty)
    c.flush(log)
    assert(log.writes.toSet == Set((1L, Some(5L)), (2L, None)))
    assert(c.delegateWrites == 2 && c.flushes == 1 && c.numDirty == 0)
    c.flush(log) // nothing dirty: not a flush
    assert(c.flushes == 1 && log.writes.size == 2)
  }

  /** A cache whose unowned entries (CacheKey.NoOwner) are written to `log` when evicted. */
  private def cacheFor(log: Log): RecordCache = { val c = new RecordCache; c.attach(CacheKey.NoOwner, log); c }

  test("eviction is least recently used first and writes dirty entries through before dropping them") {
    val log = new Log
    val c = cacheFor(log)
    val cap = 3 * entry
    c.putDirty(key(1), row(11), cap, log)
    c.putClean(key(2), row(22), cap, log)
    c.putDirty(key(3), row(33), cap, log)
    c.get(key(1)) // 1 is now the most recently used: order 2, 3, 1, as the evictions below show
    c.putDirty(key(4), row(44), cap, log) // evicts 2 (clean: nothing written)
    assert(log.writes.isEmpty && c.evictions == 1)
    c.putDirty(key(5), row(55), cap, log) // evicts 3 (dirty: written first)
    c.putDirty(key(6), row(66), cap, log) // evicts 1 (dirty)
    assert(log.writes == Seq((3L, Some(33L)), (1L, Some(11L))))
    assert(c.sizeBytes <= cap && c.numEntries == 3)
    c.flush(log)
    assert(log.writes.drop(2).toSet == Set((4L, Some(44L)), (5L, Some(55L)), (6L, Some(66L))))
  }

  test("size never exceeds the capacity; an entry larger than the capacity is written straight through") {
    val log = new Log
    val c = cacheFor(log)
    (1L to 100L).foreach(i => { c.putDirty(key(i), row(i), 7 * entry + 1, log); assert(c.sizeBytes <= 7 * entry + 1) })
    assert(c.numEntries == 7 && log.writes.size == 93)
    val tiny = new RecordCache
    tiny.putDirty(key(1), row(1), entry - 1, log)
    assert(tiny.numEntries == 0 && log.writes.last == ((1L, Some(1L))))
  }

  test("stores share a slot cache: LRU across stores, flush and drop touch only one store") {
    val c = new RecordCache
    val a = new Log
    val b = new Log
    val (ownerA, ownerB) = (new Object, new Object)
    def ka(x: Long) = CacheKey("default", row(x), ownerA)
    def kb(x: Long) = CacheKey("default", row(x), ownerB)
    val cap = 4 * entry
    c.attach(ownerA, a)
    c.attach(ownerB, b)
    c.putDirty(ka(1), row(1), cap, a)
    c.putDirty(kb(1), row(10), cap, b) // same key bytes, another store: a separate entry
    c.putClean(ka(2), row(2), cap, a)
    assert(c.get(ka(1)).map(_.value.getLong(0)).contains(1L) && c.get(kb(1)).map(_.value.getLong(0)).contains(10L))
    assert(c.ownerBytes(ownerA) == 2 * entry && c.ownerBytes(ownerB) == entry)
    c.flush(a, ownerA) // only A's dirty row
    assert(a.writes == Seq((1L, Some(1L))) && b.writes.isEmpty && c.numDirty == 1)
    c.putDirty(kb(2), row(20), cap, b)
    c.putDirty(kb(3), row(30), cap, b) // over capacity: evicts ka(2), the least recently used (clean)
    assert(c.numEntries == 4 && c.get(ka(2)).isEmpty) // (a miss leaves the order as it is)
    c.putDirty(kb(4), row(40), cap, b) // evicts ka(1): clean now, nothing written
    c.putClean(ka(5), row(5), cap, a) // evicts kb(1): dirty, written to B's store, not A's
    assert(a.writes.size == 1 && b.writes == Seq((1L, Some(10L))))
    c.dropOwner(ownerB) // B aborted: its dirty rows are gone, A's stay
    assert(c.numEntries == 1 && c.ownerBytes(ownerA) == entry && c.numDirty == 0 && c.sizeBytes == entry)
    c.flush(b, ownerB)
    assert(b.writes.size == 1)
  }

  test("dropping a store's entries drops its dirty ones too") {
    val c = new RecordCache
    val log = new Log
    c.putClean(key(1), row(1), 10 * entry, log)
    c.putDirty(key(2), row(2), 10 * entry, log)
    c.dropOwner(CacheKey.NoOwner)
    assert(c.numEntries == 0 && c.sizeBytes == 0 && c.numDirty == 0)
    c.flush(log)
    assert(log.writes.isEmpty)
  }

  test("a dirty row whose store is not open fails the eviction instead of reaching another store") {
    val c = new RecordCache
    val a = new Log
    val b = new Log
    val (ownerA, ownerB) = (new Object, new Object)
    val cap = 2 * entry
    c.attach(ownerA, a)
    c.attach(ownerB, b)
    c.putDirty(CacheKey("default", row(1), ownerA), row(1), cap, a)
    c.detach(ownerA) // A's store closed with its write still pending (its task is ending)
    c.putDirty(CacheKey("default", row(2), ownerB), row(2), cap, b)
    val e = intercept[IllegalStateException] {
      c.putDirty(CacheKey("default", row(3), ownerB), row(3), cap, b) // needs A's row out
    }
    assert(e.getMessage.contains("is not open to take it"))
    assert(a.writes.isEmpty && b.writes.isEmpty) // B's store never saw A's row
    c.attach(ownerA, a) // once A's store is open again, the same eviction writes to A
    c.putDirty(CacheKey("default", row(3), ownerB), row(3), cap, b)
    assert(a.writes == Seq((1L, Some(1L))) && b.writes.isEmpty)
  }

  test("a flush writes only its own store's rows, however many other stores' rows are dirty") {
    val c = new RecordCache
    val owners = (0 until 5).map(_ => new Object)
    val logs = owners.map(_ => new Log)
    owners.zip(logs).foreach { case (o, l) => c.attach(o, l) }
    for (i <- 0L until 100L; (o, l) <- owners.zip(logs))
      c.putDirty(CacheKey("default", row(i), o), row(i), 1000 * entry, l)
    c.flush(logs(2), owners(2))
    assert(logs(2).writes.map(_._1) == (0L until 100L))
    assert(logs.indices.filter(_ != 2).forall(i => logs(i).writes.isEmpty))
    assert(c.numDirty == 400)
  }
}
