package sluice.suppress

import scala.collection.mutable

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{GenericInternalRow, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.types.{LongType, StringType, StructField, StructType}
import org.apache.spark.unsafe.types.UTF8String
import org.scalatest.funsuite.AnyFunSuite

class SuppressionBufferSuite extends AnyFunSuite {
  private val keyStruct = StructType(Seq(StructField("user", StringType)))
  private val rowSchema = StructType(Seq(StructField("user", StringType), StructField("count", LongType)))
  private val layout = new BufferLayout(keyStruct, rowSchema)
  private val rowProj = UnsafeProjection.create(rowSchema)

  /** A map-backed store that copies what it keeps, like a state store. */
  final class MapStore extends BufferStore {
    val map = mutable.LinkedHashMap.empty[UnsafeRow, UnsafeRow]
    def get(key: UnsafeRow): UnsafeRow = map.get(key).orNull
    def put(key: UnsafeRow, value: UnsafeRow): Unit = map.put(key.copy(), value.copy())
    def remove(key: UnsafeRow): Unit = map.remove(key)
    def iterator(): Iterator[(UnsafeRow, UnsafeRow)] = map.toSeq.iterator
    def users: Set[String] = map.keys.filterNot(layout.isMeta).map(k => k.getStruct(0, 1).getUTF8String(0).toString).toSet
  }

  private def key(user: String) = layout.key(new GenericInternalRow(Array[Any](UTF8String.fromString(user))))
  private def row(user: String, count: Long): InternalRow =
    rowProj(new GenericInternalRow(Array[Any](UTF8String.fromString(user), count))).copy()
  private def decode(r: UnsafeRow): (String, Long) = (r.getUTF8String(0).toString, r.getLong(1))

  private def buffer(config: BufferConfig, mem: MapStore = new MapStore, disk: Option[MapStore] = None) =
    new SuppressionBuffer(layout, mem, disk, config, "op", 0)

  private def drain(b: SuppressionBuffer, due: Long => Boolean): Seq[(String, Long)] = {
    val out = mutable.ArrayBuffer.empty[(String, Long)]
    b.drain(due, r => out += decode(r))
    out.toSeq
  }

  test("an update replaces the row but keeps the original buffer time") {
    val mem = new MapStore
    val b = buffer(BufferConfig.unbounded(), mem)
    assert(b.put(key("a"), row("a", 1), 100L) == 100L)
    assert(b.put(key("a"), row("a", 2), 500L) == 100L)
    assert(b.stats.absorbed == 1)
    assert(drain(b, _ <= 99L).isEmpty)
    assert(drain(b, _ <= 100L) == Seq(("a", 2L)))
    assert(mem.users.isEmpty)
  }

  test("drain emits only due rows and accounts records, bytes and the earliest time left") {
    val b = buffer(BufferConfig.unbounded())
    b.put(key("a"), row("a", 1), 10L)
    b.put(key("b"), row("b", 1), 20L)
    b.put(key("c"), row("c", 1), 30L)
    assert(drain(b, _ <= 20L).toSet == Set(("a", 1L), ("b", 1L)))
    assert(b.stats.emitted == 2 && b.stats.records == 1 && b.stats.minBufferTime == 30L)
    assert(b.stats.bytes > 0 && b.stats.bytesMax >= 3 * b.stats.bytes)
  }

  test("emit-early emits the oldest rows until the record bound holds (full means strictly greater)") {
    val mem = new MapStore
    val b = buffer(BufferConfig.maxRecords(2), mem)
    Seq("c" -> 30L, "a" -> 10L, "b" -> 20L, "d" -> 40L).foreach { case (u, t) => b.put(key(u), row(u, t), t) }
    assert(drain(b, _ => false) == Seq(("a", 10L), ("b", 20L)))
    assert(b.stats.evicted == 2 && b.stats.records == 2 && mem.users == Set("c", "d"))
    assert(b.stats.minBufferTime == 30L)
  }

  test("emit-early on a byte bound") {
    val probe = buffer(BufferConfig.unbounded())
    probe.put(key("a"), row("a", 1), 1L)
    drain(probe, _ => false)
    val entryBytes = probe.stats.bytes
    val b = buffer(BufferConfig.maxBytes(entryBytes * 2))
    Seq("a" -> 1L, "b" -> 2L, "c" -> 3L).foreach { case (u, t) => b.put(key(u), row(u, t), t) }
    assert(drain(b, _ => false) == Seq(("a", 1L)))
    assert(b.stats.bytes == entryBytes * 2)
  }

  test("shut-down fails naming the operator, records and bytes; a bound that holds does not") {
    val b = buffer(BufferConfig.maxRecords(1).shutDownWhenFull())
    b.put(key("a"), row("a", 1), 1L)
    b.put(key("b"), row("b", 1), 2L)
    val e = intercept[BufferFullException](drain(b, _ => false))
    assert(e.getMessage.contains("operator op") && e.getMessage.contains("[records/max] = [2/1]"))
    assert(e.getMessage.contains("[bytes/max] = [") && e.records == 2)
    val ok = buffer(BufferConfig.maxRecords(2).shutDownWhenFull())
    ok.put(key("a"), row("a", 1), 1L)
    ok.put(key("b"), row("b", 1), 2L)
    assert(drain(ok, _ => false).isEmpty)
  }

  test("spill-to-disk keeps the in-memory part within the bound, emits nothing early, same results") {
    val mem = new MapStore
    val disk = new MapStore
    val b = buffer(BufferConfig.maxRecords(2).spillToDiskWhenFull(), mem, Some(disk))
    Seq("a" -> 10L, "b" -> 20L, "c" -> 30L, "d" -> 40L).foreach { case (u, t) => b.put(key(u), row(u, 1), t) }
    assert(drain(b, _ => false).isEmpty)
    assert(mem.users == Set("a", "b") && disk.users == Set("c", "d"))
    assert(b.stats.records == 2 && b.stats.diskRecords == 2 && b.stats.evicted == 0 && b.stats.minBufferTime == 10L)
    // An update to a spilled key stays on disk and keeps its time.
    val b2 = buffer(BufferConfig.maxRecords(2).spillToDiskWhenFull(), mem, Some(disk))
    assert(b2.put(key("d"), row("d", 2), 99L) == 40L)
    assert(drain(b2, _ <= 40L).toSet == Set(("a", 1L), ("b", 1L), ("c", 1L), ("d", 2L)))
    assert(mem.users.isEmpty && disk.users.isEmpty)
  }

  test("stream time is kept in a metadata entry that is never emitted or counted") {
    val mem = new MapStore
    val b = buffer(BufferConfig.maxRecords(0).shutDownWhenFull(), mem)
    assert(b.storedStreamTime.isEmpty)
    b.storeStreamTime(1234L)
    assert(drain(b, _ => true).isEmpty && b.stats.records == 0)
    assert(buffer(BufferConfig.unbounded(), mem).storedStreamTime.contains(1234L))
  }

  test("configs: eager vs strict types, bounds and durations validated") {
    val eager: EagerBufferConfig = BufferConfig.maxRecords(5).withMaxBytes(10)
    assert(eager.whenFull == BufferFullStrategy.EmitEarly && eager.maxRecords == 5 && eager.maxBytes == 10)
    val strict: StrictBufferConfig = eager.shutDownWhenFull()
    assert(strict.maxRecords == 5 && strict.whenFull == BufferFullStrategy.ShutDown)
    assert(strict.spillToDiskWhenFull().whenFull == BufferFullStrategy.SpillToDisk)
    assert(!eager.withNoBound().isBounded)
    assert(Suppressed.untilWindowCloses(BufferConfig.unbounded()).buffer == BufferConfig.unbounded())
    // untilWindowCloses(eager) does not compile: the type enforces a strict config.
    assertTypeError("Suppressed.untilWindowCloses(BufferConfig.maxRecords(1))")
    intercept[IllegalArgumentException](BufferConfig.maxRecords(-1))
    intercept[IllegalArgumentException](Suppressed.untilTimeLimit(-1L, BufferConfig.unbounded()))
    intercept[IllegalArgumentException](Suppressed.untilTimeLimit(java.time.Duration.ofSeconds(-1), eager))
  }
}
