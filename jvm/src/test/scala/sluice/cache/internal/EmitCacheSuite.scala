package sluice.cache.internal

import scala.collection.mutable

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.types.{LongType, StructField, StructType}
import org.scalatest.funsuite.AnyFunSuite

import sluice.state.KeyedRows

class EmitCacheSuite extends AnyFunSuite {
  private val keySchema = StructType(Seq(StructField("k", LongType)))
  private val rowSchema = StructType(Seq(StructField("k", LongType), StructField("n", LongType)))
  private val layout = new EmitCacheLayout(keySchema, rowSchema)
  private val keyProj = UnsafeProjection.create(keySchema)
  private def key(k: Long): UnsafeRow = keyProj(InternalRow(k)).copy()

  /** A durable store: survives between batches like a committed state store. */
  private class MapStore extends KeyedRows {
    val rows = mutable.LinkedHashMap.empty[UnsafeRow, UnsafeRow]
    var index: Option[EmitCacheIndex] = None // as EmitCacheIndexCache keeps it between batches
    override def get(k: UnsafeRow): UnsafeRow = rows.getOrElse(k, null)
    override def put(k: UnsafeRow, v: UnsafeRow): Unit = rows(k.copy()) = v.copy()
    override def remove(k: UnsafeRow): Unit = rows -= k
    override def iterator(): Iterator[(UnsafeRow, UnsafeRow)] = rows.iterator
  }

  /** One batch; the index kept from the batch before unless `rescan` (as after a restart). */
  private def batch(store: MapStore, id: Long, ms: Long, updates: Seq[(Long, Long)], maxBytes: Long = 1 << 20,
      rescan: Boolean = false): (Seq[(Long, Long)], EmitCacheStats) = {
    val out = mutable.ArrayBuffer.empty[(Long, Long)]
    val emit: InternalRow => Unit = r => out += ((r.getLong(0), r.getLong(1)))
    val index = store.index.filterNot(_ => rescan).getOrElse(EmitCacheIndex.scan(layout, store))
    val c = new EmitCache(layout, store, index, maxBytes, intervalMs = 1000, batchMs = ms, batchId = id)
    updates.foreach { case (k, n) => c.update(key(k), InternalRow(k, n)) }
    c.finish().foreach(emit)
    store.index = Some(index)
    (out.toSeq, c.stats)
  }

  test("a key updated many times within the interval is forwarded once, with its latest value") {
    val store = new MapStore
    val (o1, s1) = batch(store, 0, 0, Seq(1L -> 1L, 1L -> 2L, 2L -> 1L))
    assert(o1.isEmpty && s1.absorbed == 1 && s1.nextDueMs == 1000)
    val (o2, s2) = batch(store, 1, 500, Seq(1L -> 3L))
    assert(o2.isEmpty && s2.absorbed == 1 && s2.nextDueMs == 1000) // due time kept from the first update
    val (o3, s3) = batch(store, 2, 1000, Nil) // no input, but due
    assert(o3.toSet == Set(1L -> 3L, 2L -> 1L) && s3.forwarded == 2 && s3.nextDueMs == Long.MaxValue)
    assert(store.rows.isEmpty)
  }

  test("over the byte bound the least recently updated rows are forwarded first") {
    val store = new MapStore
    val probe = new MapStore
    batch(probe, 0, 0, Seq(9L -> 9L))
    val entryBytes = probe.rows.head match {
      case (k, v) => k.getSizeInBytes + v.getSizeInBytes + RecordCache.EntryOverheadBytes
    }
    val (o1, _) = batch(store, 0, 0, Seq(1L -> 1L, 2L -> 1L, 3L -> 1L), maxBytes = 3 * entryBytes)
    assert(o1.isEmpty)
    // 1 is refreshed, then 4 arrives: 2 is now the least recently updated and goes first, then 3
    val (o2, s2) = batch(store, 1, 10, Seq(1L -> 2L, 4L -> 1L, 5L -> 1L), maxBytes = 3 * entryBytes)
    assert(o2 == Seq(2L -> 1L, 3L -> 1L) && s2.evicted == 2 && s2.bytes <= 3 * entryBytes)
    assert(store.rows.keys.map(_.getLong(0)).toSet == Set(1L, 4L, 5L))
  }

  test("what is forwarded early depends on the batch's updates as a set, not on their arrival order") {
    val probe = new MapStore
    batch(probe, 0, 0, Seq(9L -> 9L))
    val entryBytes = probe.rows.head match {
      case (k, v) => k.getSizeInBytes + v.getSizeInBytes + RecordCache.EntryOverheadBytes
    }
    val held = Seq(1L -> 1L, 2L -> 1L, 3L -> 1L)
    val updates = Seq(7L -> 1L, 5L -> 1L, 2L -> 2L, 6L -> 1L)
    val results = updates.permutations.map { order =>
      val store = new MapStore
      batch(store, 0, 0, held, maxBytes = 3 * entryBytes)
      val (out, s) = batch(store, 1, 10, order, maxBytes = 3 * entryBytes)
      (out, s.evicted, store.rows.keys.map(_.getLong(0)).toSet)
    }.toSet
    // held 1 and 3 are the least recently updated; then this batch's rows by key bytes: 2 (updated) first
    assert(results == Set((Seq(1L -> 1L, 3L -> 1L, 2L -> 2L), 3L, Set(5L, 6L, 7L))))
  }

  test("an index kept between batches forwards what a scan of the store at every batch would") {
    val probe = new MapStore
    batch(probe, 0, 0, Seq(9L -> 9L))
    val entryBytes = probe.rows.head match {
      case (k, v) => k.getSizeInBytes + v.getSizeInBytes + RecordCache.EntryOverheadBytes
    }
    val rnd = new scala.util.Random(11)
    val kept, scanned = new MapStore
    for (id <- 0L until 200L) {
      val updates = Seq.fill(rnd.nextInt(6))(rnd.nextInt(12).toLong -> rnd.nextInt(100).toLong)
      val ms = id * 300 // the interval (1 s) elapses every few batches
      val a = batch(kept, id, ms, updates, maxBytes = 5 * entryBytes)
      val b = batch(scanned, id, ms, updates, maxBytes = 5 * entryBytes, rescan = true)
      assert(a == b, s"batch $id")
      assert(kept.rows == scanned.rows, s"batch $id")
      val fresh = EmitCacheIndex.scan(layout, kept)
      assert((kept.index.get.bytes, kept.index.get.size, kept.index.get.oldestInsertMs) ==
          (fresh.bytes, fresh.size, fresh.oldestInsertMs), s"batch $id")
    }
    assert(kept.rows.nonEmpty || scanned.rows.isEmpty)
  }
}
