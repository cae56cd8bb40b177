package sluice.suppress.internal

import scala.collection.mutable
import scala.util.Random

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{GenericInternalRow, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.types.{LongType, StringType, StructField, StructType}
import org.apache.spark.unsafe.types.UTF8String
import org.scalatest.funsuite.AnyFunSuite

import sluice.state.{CommittedIndexCache, KeyedRows}
import sluice.suppress._

class SuppressionBufferSuite extends AnyFunSuite {
  private val keyStruct = StructType(Seq(StructField("user", StringType)))
  private val rowSchema = StructType(Seq(
      StructField("user", StringType), StructField("count", LongType), StructField("pad", StringType)))
  private val layout = new BufferLayout(keyStruct, rowSchema)
  private val rowProj = UnsafeProjection.create(rowSchema)

  /** A map-backed store that copies what it keeps, like a state store; iterates in hash order. */
  final class MapStore extends KeyedRows {
    val map = mutable.HashMap.empty[UnsafeRow, UnsafeRow]
    def get(key: UnsafeRow): UnsafeRow = map.get(key).orNull
    def put(key: UnsafeRow, value: UnsafeRow): Unit = map.put(key.copy(), value.copy())
    def remove(key: UnsafeRow): Unit = map.remove(key)
    var scans = 0
    def iterator(): Iterator[(UnsafeRow, UnsafeRow)] = { scans += 1; map.iterator }
    def entries: Map[String, Long] = map.iterator.filterNot(e => layout.isMeta(e._1))
      .map { case (k, v) => userOf(k) -> layout.bufferTime(v) }.toMap
    def users: Set[String] = entries.keySet
  }

  private def userOf(k: UnsafeRow): String = k.getStruct(0, 1).getUTF8String(0).toString
  private def key(user: String) = layout.key(new GenericInternalRow(Array[Any](UTF8String.fromString(user))))
  private def row(user: String, count: Long, pad: String = ""): InternalRow =
    rowProj(new GenericInternalRow(Array[Any](
          UTF8String.fromString(user), count, UTF8String.fromString(pad)))).copy()
  private def decode(r: UnsafeRow): (String, Long) = (r.getUTF8String(0).toString, r.getLong(1))

  private def part(store: MapStore) = new IndexedStore(store, IndexedStore.scan(layout, store))

  private def buffer(config: BufferConfig, mem: MapStore = new MapStore, disk: Option[MapStore] = None) =
    new SuppressionBuffer(layout, part(mem), disk.map(part), config, "op", 0)

  /** Puts each (user, buffer time) with count = time, collecting what follows each put. */
  private def putAll(b: SuppressionBuffer, rows: Seq[(String, Long)], due: Long => Boolean = _ => false)
      : Seq[(String, Long)] =
    rows.flatMap { case (u, t) => b.put(key(u), row(u, t), t); b.afterPut(due).map(decode).toList }

  private def release(b: SuppressionBuffer, due: Long => Boolean): Seq[(String, Long)] =
    b.afterPut(due).map(decode).toList

  test("an update replaces the row but keeps the original buffer time") {
    val mem = new MapStore
    val b = buffer(BufferConfig.unbounded(), mem)
    assert(b.put(key("a"), row("a", 1), 100L) == 100L)
    assert(b.put(key("a"), row("a", 2), 500L) == 100L)
    assert(b.stats.absorbed == 1)
    assert(release(b, _ <= 99L).isEmpty)
    assert(release(b, _ <= 100L) == Seq(("a", 2L)))
    assert(mem.users.isEmpty)
  }

  test("release emits due rows in buffer order: time, then key bytes; accounts what is left") {
    val b = buffer(BufferConfig.unbounded())
    putAll(b, Seq("c" -> 20L, "b" -> 10L, "d" -> 30L, "a" -> 20L))
    assert(release(b, _ <= 20L) == Seq(("b", 10L), ("a", 20L), ("c", 20L)))
    val s = b.finish()
    assert(s.emitted == 3 && s.records == 1 && s.minBufferTime == 30L)
    assert(s.bytes > 0 && s.bytesMax >= 4 * s.bytes)
  }

  test("ties on buffer time: the key with the smaller bytes is evicted first, whatever the put order") {
    for (order <- Seq(Seq("a", "b"), Seq("b", "a"))) {
      val mem = new MapStore
      val b = buffer(BufferConfig.maxRecords(1), mem)
      assert(putAll(b, order.map(_ -> 5L)) == Seq(("a", 5L)), order)
      assert(mem.users == Set("b"))
    }
  }

  test("emit-early evicts the oldest as rows are put: never more than the bound after a put's work") {
    val mem = new MapStore
    val b = buffer(BufferConfig.maxRecords(2), mem)
    val out = Seq("c" -> 30L, "a" -> 10L, "b" -> 20L, "d" -> 40L).flatMap { case (u, t) =>
      b.put(key(u), row(u, t), t)
      val evicted = b.afterPut(_ => false).map(decode).toList
      assert(mem.users.size <= 2)
      evicted
    }
    // a is evicted as soon as b arrives (3 > 2), b when d arrives.
    assert(out == Seq(("a", 10L), ("b", 20L)))
    val s = b.finish()
    assert(s.evicted == 2 && s.records == 2 && mem.users == Set("c", "d") && s.minBufferTime == 30L)
  }

  test("due rows are released before the capacity check (which may then evict nothing)") {
    val mem = new MapStore
    val b = buffer(BufferConfig.maxRecords(1), mem)
    putAll(b, Seq("a" -> 1L))
    // b makes 2 > 1, but a is due first: released, not evicted.
    assert(putAll(b, Seq("b" -> 2L), _ <= 1L) == Seq(("a", 1L)))
    assert(b.stats.emitted == 1 && b.stats.evicted == 0 && mem.users == Set("b"))
  }

  test("a byte bound: the largest in-memory size ever reached is at most the bound plus one row") {
    val probe = buffer(BufferConfig.unbounded())
    putAll(probe, Seq("a" -> 1L))
    val entryBytes = probe.finish().bytes
    val bound = entryBytes * 3
    val mem = new MapStore
    val b = buffer(BufferConfig.maxBytes(bound), mem)
    val evicted = putAll(b, (0 until 10).map(i => s"u$i" -> i.toLong))
    assert(evicted == (0 until 7).map(i => s"u$i" -> i.toLong))
    val s = b.finish()
    assert(s.bytes == bound && s.bytesMax == bound + entryBytes)
  }

  test("shut-down fails at the put that overfills, naming the operator, records and bytes") {
    val b = buffer(BufferConfig.maxRecords(1).shutDownWhenFull())
    putAll(b, Seq("a" -> 1L))
    b.put(key("b"), row("b", 1), 2L)
    val e = intercept[BufferFullException](b.afterPut(_ => false).toList)
    assert(e.getMessage.contains("operator op") && e.getMessage.contains("[records/max] = [2/1]"))
    assert(e.getMessage.contains("[bytes/max] = [") && e.records == 2)
    val ok = buffer(BufferConfig.maxRecords(2).shutDownWhenFull())
    assert(putAll(ok, Seq("a" -> 1L, "b" -> 2L)).isEmpty)
  }

  test("spill-to-disk moves the newest to disk as rows are put; release merges both parts in order") {
    val mem = new MapStore
    val disk = new MapStore
    val b = buffer(BufferConfig.maxRecords(2).spillToDiskWhenFull(), mem, Some(disk))
    Seq("c" -> 30L, "d" -> 40L, "a" -> 10L, "b" -> 20L).foreach { case (u, t) =>
      b.put(key(u), row(u, 1), t)
      assert(b.afterPut(_ => false).isEmpty)
      assert(mem.users.size <= 2)
    }
    assert(mem.users == Set("a", "b") && disk.users == Set("c", "d"))
    val s = b.finish()
    assert(s.records == 2 && s.diskRecords == 2 && s.evicted == 0 && s.minBufferTime == 10L)
    // An update to a spilled key stays on disk and keeps its time; a reloaded buffer (indexes
    // rebuilt from the stores) releases across both parts in buffer order.
    val b2 = buffer(BufferConfig.maxRecords(2).spillToDiskWhenFull(), mem, Some(disk))
    assert(b2.put(key("d"), row("d", 2), 99L) == 40L && disk.entries("d") == 40L)
    assert(release(b2, _ <= 40L) == Seq(("a", 1L), ("b", 1L), ("c", 1L), ("d", 2L)))
    assert(mem.users.isEmpty && disk.users.isEmpty)
  }

  test("a batch touches only what it puts and releases: no store is scanned once the buffer is indexed") {
    for (config <-
        Seq(BufferConfig.unbounded(), BufferConfig.maxRecords(50), BufferConfig.maxRecords(50).spillToDiskWhenFull())) {
      val mem = new MapStore
      val disk = new MapStore
      putAll(buffer(config, mem, Some(disk)), (0 until 200).map(i => f"k$i%03d" -> (i % 7).toLong))
      val b = buffer(config, mem, Some(disk))
      val scans = (mem.scans, disk.scans)
      putAll(b, (0 until 100).map(i => f"n$i%03d" -> (10L + i % 3)), _ <= 3L)
      release(b, _ <= 11L)
      b.finish()
      assert((mem.scans, disk.scans) == scans, config)
    }
  }

  test("stream time is kept in a metadata entry that is never emitted, counted or indexed") {
    val mem = new MapStore
    val b = buffer(BufferConfig.maxRecords(0).shutDownWhenFull(), mem)
    assert(b.storedStreamTime.isEmpty)
    b.storeStreamTime(1234L)
    assert(release(b, _ => true).isEmpty && b.finish().records == 0)
    val reloaded = buffer(BufferConfig.unbounded(), mem)
    assert(reloaded.storedStreamTime.contains(1234L) && reloaded.finish().records == 0)
  }

  test("the index cache hands an index out once, only for the version and checkpoint id it reflects") {
    val cache = new CommittedIndexCache[BufferIndex] // BufferIndexCache's class, without the executor's entries
    val index = new BufferIndex
    cache.offer("s", 5L, None, index)
    assert(cache.take("s", 4L, None).isEmpty)
    assert(cache.take("s", 5L, None).isEmpty) // a mismatch drops it
    cache.offer("s", 5L, Some("x"), index)
    assert(cache.take("s", 5L, Some("y")).isEmpty)
    cache.offer("s", 5L, Some("x"), index)
    assert(cache.take("s", 5L, Some("x")).exists(_ eq index))
    assert(cache.take("s", 5L, Some("x")).isEmpty) // taken: nobody else gets it
    cache.offer("s", 6L, None, index)
    cache.offer("t", 1L, None, index)
    cache.retain(_ == "t")
    assert(cache.take("s", 6L, None).isEmpty && cache.take("t", 1L, None).exists(_ eq index))
  }

  test("index entries order by buffer time (negative too), then unsigned key bytes") {
    val k = key("a")
    val times = Seq(Long.MinValue, -5L, -1L, 0L, 1L, 7L, Long.MaxValue)
    val encoded = Random.shuffle(times).map(BufferIndex.encode(_, k)).sortWith(BufferIndex.Order.compare(_, _) < 0)
    assert(encoded.map(BufferIndex.bufferTime) == times)
    assert(BufferIndex.key(BufferIndex.encode(3L, k), 1) == k)
    // A byte >= 0x80 sorts after one < 0x80 (unsigned), unlike Java's signed bytes.
    assert(BufferIndex.Order.compare(BufferIndex.encode(0L, key("\u00e9")), BufferIndex.encode(0L, key("z"))) > 0)
  }

  // --- against a reference model --------------------------------------------------------------

  /** The buffer as a plain list, every step by a full sort: what the indexed buffer must match. */
  private final class Model(config: BufferConfig) {
    final case class E(user: String, time: Long, count: Long, pad: String, size: Long, onDisk: Boolean) {
      val keyBytes: Array[Byte] = key(user).copy().getBytes
    }
    val entries = mutable.Map.empty[String, E]
    var emitted, evicted, absorbed = 0L
    var bytesMax = 0L

    private def before(a: E, b: E): Boolean =
      if (a.time != b.time) a.time < b.time else compareUnsigned(a.keyBytes, b.keyBytes) < 0
    private def compareUnsigned(a: Array[Byte], b: Array[Byte]): Int = {
      var i = 0
      while (i < a.length && i < b.length) {
        val c = (a(i) & 0xff) - (b(i) & 0xff)
        if (c != 0) return c
        i += 1
      }
      a.length - b.length
    }
    private def sorted(onDisk: Option[Boolean]) =
      entries.values.filter(e => onDisk.forall(_ == e.onDisk)).toSeq.sortWith(before)
    private def size(user: String, time: Long, count: Long, pad: String) =
      (key(user).getSizeInBytes + layout.value(time, row(user, count, pad)).getSizeInBytes).toLong
    def memRecords: Long = entries.values.count(!_.onDisk).toLong
    def memBytes: Long = entries.values.filterNot(_.onDisk).map(_.size).sum
    private def full = memRecords > config.maxRecords || memBytes > config.maxBytes

    def put(user: String, count: Long, pad: String, t: Long): Long = {
      val e = entries.get(user) match {
        case Some(old) => absorbed += 1; old.copy(count = count, pad = pad, size = size(user, old.time, count, pad))
        case None => E(user, t, count, pad, size(user, t, count, pad), onDisk = false)
      }
      entries(user) = e
      bytesMax = math.max(bytesMax, memBytes)
      e.time
    }

    /** Rows out, or a BufferFullException's (records, bytes). */
    def afterPut(isDue: Long => Boolean): Either[(Long, Long), Seq[(String, Long, String)]] = {
      val out = mutable.ArrayBuffer.empty[(String, Long, String)]
      for (e <- sorted(None).takeWhile(e => isDue(e.time))) {
        entries.remove(e.user); emitted += 1; out += ((e.user, e.count, e.pad))
      }
      if (config.isBounded && full) config.whenFull match {
        case BufferFullStrategy.ShutDown => return Left((memRecords, memBytes))
        case BufferFullStrategy.EmitEarly =>
          while (full) {
            val e = sorted(Some(false)).head
            entries.remove(e.user); evicted += 1; out += ((e.user, e.count, e.pad))
          }
        case BufferFullStrategy.SpillToDisk =>
          while (full) {
            val e = sorted(Some(false)).last
            entries(e.user) = e.copy(onDisk = true)
          }
      }
      Right(out.toSeq)
    }
  }

  private def randomRun(seed: Long, config: BufferConfig): Unit = {
    val rnd = new Random(seed)
    val mem = new MapStore
    val disk = if (config.whenFull == BufferFullStrategy.SpillToDisk) Some(new MapStore) else None
    val model = new Model(config)
    var b = buffer(config, mem, disk)
    var emitted, evicted, absorbed = 0L
    var bytesMax = 0L
    def fold(): Unit = {
      val s = b.finish()
      emitted += s.emitted; evicted += s.evicted; absorbed += s.absorbed; bytesMax = math.max(bytesMax, s.bytesMax)
    }
    // Keys of several lengths (and bytes >= 0x80), times with many ties, pads of several sizes.
    val users = (0 until 12).map(i => ("abé" * (1 + i % 3)).take(1 + i % 5) + (('a' + i).toChar))
    var threshold = -1L
    var step = 0
    var failed = false
    while (step < 400 && !failed) {
      step += 1
      rnd.nextInt(20) match {
        case 0 =>
          // A reload: a new buffer over the same stores, indexes rebuilt by a scan.
          fold()
          b = buffer(config, mem, disk)
        case 1 | 2 =>
          threshold += rnd.nextInt(4)
          val due = (t: Long) => t <= threshold
          assert(
            b.afterPut(due).map(r =>
              (r.getUTF8String(0).toString, r.getLong(1),
                r.getUTF8String(2).toString)).toList == model.afterPut(due).toOption.get, s"seed $seed step $step")
        case _ =>
          val u = users(rnd.nextInt(users.size))
          val t = threshold - 1 + rnd.nextInt(8) // a new key may be due at once
          val count = rnd.nextInt(1000).toLong
          val pad = "x" * (rnd.nextInt(4) * 9)
          assert(b.put(key(u), row(u, count, pad), t) == model.put(u, count, pad, t))
          val due = (x: Long) => x <= threshold
          model.afterPut(due) match {
            case Left((records, bytes)) =>
              val e = intercept[BufferFullException](b.afterPut(due).toList)
              assert((e.records, e.bytes) == (records, bytes))
              failed = true
            case Right(expected) =>
              val got = b.afterPut(due).map(r =>
                (r.getUTF8String(0).toString, r.getLong(1),
                  r.getUTF8String(2).toString)).toList
              assert(got == expected, s"seed $seed step $step")
          }
      }
      // The stores hold what the model holds, where it holds it.
      assert(mem.entries == model.entries.values.filterNot(_.onDisk).map(e => e.user -> e.time).toMap)
      disk.foreach(d => assert(d.entries == model.entries.values.filter(_.onDisk).map(e => e.user -> e.time).toMap))
      if (!failed && config.isBounded && config.whenFull != BufferFullStrategy.ShutDown) {
        assert(model.memRecords <= config.maxRecords && model.memBytes <= config.maxBytes)
      }
    }
    if (!failed) {
      fold()
      assert((emitted, evicted, absorbed, bytesMax) == (model.emitted, model.evicted, model.absorbed, model.bytesMax),
        s"seed $seed")
      val s = b.finish()
      assert(s.records == model.memRecords && s.bytes == model.memBytes)
      // The indexes left behind are exactly what a scan of the stores gives.
      val fresh = buffer(config, mem, disk).finish()
      assert((fresh.records, fresh.bytes, fresh.diskRecords, fresh.diskBytes, fresh.minBufferTime) ==
        (s.records, s.bytes, s.diskRecords, s.diskBytes, s.minBufferTime))
    }
  }

  private val configs: Seq[BufferConfig] = Seq(
    BufferConfig.unbounded(),
    BufferConfig.maxRecords(3),
    BufferConfig.maxBytes(400),
    BufferConfig.maxRecords(4).withMaxBytes(600),
    BufferConfig.maxRecords(3).spillToDiskWhenFull(),
    BufferConfig.maxBytes(350).spillToDiskWhenFull(),
    BufferConfig.maxRecords(5).shutDownWhenFull())

  for (config <- configs) {
    test(s"matches a reference model over random operations (15 seeds): $config") {
      (1L to 15L).foreach(seed => randomRun(seed * 7919 + config.toString.hashCode, config))
    }
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
