package sluice.windowstore

import java.nio.file.Files

import scala.collection.mutable
import scala.util.Random

import org.apache.hadoop.conf.Configuration
import org.scalatest.PrivateMethodTester
import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String

import sluice.windowstore.internal.{PrefixIndex, SegmentedStateMap}

/**
 * Seeded random operations on prefix-scanned state (puts, overwrites, removes, prefix scans with
 * removes while iterating, commits, aborts, expiry inside a version, compaction, snapshots,
 * restarts in a new provider, loads of older versions) against a model of what the store must
 * hold, for session-window-like keys with a window struct (segmented by window start) and for the
 * key Spark's session windows use (group key + a session start timestamp: one segment).
 */
class PrefixScanModelSuite extends AnyFunSuite with PrivateMethodTester {

  /** Entries in a map's prefix index, read from its private field: one per live key is an
   *  invariant no scan can show (a scan skips an entry whose key is gone). */
  private def indexedKeys(map: SegmentedStateMap): Int =
    Option(map.invokePrivate(PrivateMethod[PrefixIndex](Symbol("index"))())).map(_.size).getOrElse(0)
  private val sec = 1000000L
  private val windowType = StructType(Seq(
      StructField("start", TimestampType), StructField("end", TimestampType)))
  private val valueSchema = StructType(Seq(StructField("v", LongType), StructField("pad", StringType)))
  private val valueProj = UnsafeProjection.create(valueSchema)
  private val prefixProj = UnsafeProjection.create(StructType(Seq(StructField("k", StringType))))

  private case class KeyKind(name: String, schema: StructType, windowed: Boolean) {
    private val proj = UnsafeProjection.create(schema)
    def key(k: String, start: Long): UnsafeRow = {
      val w = if (windowed) InternalRow(start * sec, (start + 10) * sec) else start * sec
      proj(InternalRow(UTF8String.fromString(k), w)).copy()
    }
    def startOf(key: UnsafeRow): Long =
      (if (windowed) key.getStruct(1, 2).getLong(0) else key.getLong(1)) / sec
  }
  private val kinds = Seq(
    KeyKind("window struct",
      StructType(Seq(StructField("k", StringType),
          StructField("session_window", windowType))), windowed = true),
    KeyKind("session start timestamp",
      StructType(Seq(StructField("k", StringType),
          StructField("sessionStartTime", TimestampType, nullable = false))), windowed = false))

  private def prefix(k: String): UnsafeRow = prefixProj(InternalRow(UTF8String.fromString(k))).copy()
  private def value(v: Long, padBytes: Int): UnsafeRow =
    valueProj(InternalRow(v, UTF8String.fromString("p" * padBytes))).copy()

  private val RetentionSec = 40L

  private def newProvider(dir: String, kind: KeyKind): InMemoryWindowStoreProvider = {
    val p = new InMemoryWindowStoreProvider(Some(
        WindowStoreSettings("model", RetentionSec * 1000, snapshotInterval = 3)))
    p.init(StateStoreId(dir, 0, 0), kind.schema, valueSchema,
      PrefixKeyScanStateEncoderSpec(kind.schema, 1), useColumnFamilies = false,
      new StateStoreConf(new SQLConf), new Configuration())
    p
  }

  /** A key as (group key, start in seconds); a value as (v, pad length). */
  private type Key = (String, Long)
  private type Value = (Long, Int)

  /** What a committed version holds: entries and stream time (seconds, None before any put). */
  private case class Committed(entries: Map[Key, Value], streamTime: Option[Long])

  for (kind <- kinds; seed <- 1 to 3) test(s"random operations match a model: ${kind.name}, seed $seed") {
    val rnd = new Random(seed)
    val dir = Files.createTempDirectory("prefixmodel").toString
    val prefixes = (0 until 24).map(i => s"user-$i")
    val history = mutable.Map[Long, Committed](0L -> Committed(Map.empty, None))
    var p = newProvider(dir, kind)
    var version = 0L
    val seen = mutable.Map[String, Int]().withDefaultValue(0)
    var compactionBytes = 0L
    def count(what: String): Unit = seen(what) += 1

    def decode(pair: UnsafeRowPair): (Key, Value) =
      (pair.key.getUTF8String(0).toString, kind.startOf(pair.key)) ->
        (pair.value.getLong(0), pair.value.getUTF8String(1).numBytes())

    for (round <- 0 until 120) {
      val base = history(version)
      val working = mutable.Map[Key, Value]() ++= base.entries
      var stream = base.streamTime
      val streamAtOpen = stream
      def threshold(t: Option[Long]): Option[Long] = if (kind.windowed) t.map(_ - RetentionSec) else None
      def expireModel(): Unit = threshold(stream).foreach(th => working.filterInPlace((k, _) => k._2 > th))

      val s = p.getStore(version)
      // Window starts drift forward, so old segments expire and late puts are dropped.
      val drift = round / 6
      def check(): Unit = {
        for (k <- prefixes) {
          val scanned = s.prefixScan(prefix(k)).map(decode).toList
          assert(scanned.map(_._1).distinct.size == scanned.size, s"no key twice in a scan of $k")
          assert(scanned.toMap == working.filter(_._1._1 == k).toMap, s"prefix $k in round $round")
        }
        assert(s.iterator().map(decode).toMap == working.toMap)
        assert(p.liveMap.numKeys == working.size)
        assert(indexedKeys(p.liveMap) == working.size, "one index entry per live key")
      }
      for (_ <- 0 until 60 + rnd.nextInt(120)) {
        val k = prefixes(rnd.nextInt(prefixes.size))
        val start = (drift + rnd.nextInt(6) - 2) * 10L
        rnd.nextInt(100) match {
          case r if r < 50 =>
            // Half of the values of a few sizes, so that puts write over retired records (and
            // move index anchors off them); half of any size, so that garbage needs compaction.
            val v = (rnd.nextLong(), if (rnd.nextBoolean()) rnd.nextInt(4) * 8 else rnd.nextInt(2000))
            s.put(kind.key(k, start), value(v._1, v._2))
            if (kind.windowed && stream.forall(start > _)) stream = Some(start)
            if (threshold(streamAtOpen).forall(start > _)) working((k, start)) = v
            else count("late put dropped")
          case r if r < 65 =>
            // Remove an existing key of this prefix if any, else a key that may not exist.
            val victim = working.keys.filter(_._1 == k).toSeq.sortBy(_._2).headOption.getOrElse((k, start))
            s.remove(kind.key(victim._1, victim._2))
            working.remove(victim)
          case r if r < 75 =>
            val expected = working.filter(_._1._1 == k).toMap
            val got = s.prefixScan(prefix(k)).map(decode).toMap
            assert(got == expected, s"scan of $k")
            if (got.nonEmpty) count("scan with results")
          case r if r < 82 =>
            // As Spark's session-window operator does: remove keys of the prefix while scanning it.
            // The first key seen removes all the others, which the scan must then not return.
            val expected = working.filter(_._1._1 == k).toMap
            val it = s.prefixScan(prefix(k))
            var returned = List.empty[(Key, Value)]
            while (it.hasNext) {
              val (key, v) = decode(it.next())
              returned ::= key -> v
              (if (returned.size == 1) expected.keys else Seq(key)).foreach { x =>
                s.remove(kind.key(x._1, x._2))
                working.remove(x)
              }
            }
            assert(returned.size == math.min(1, expected.size), s"scan of $k while removing")
            assert(returned.forall { case (key, v) => expected.get(key).contains(v) })
            if (expected.size > 1) count("removed during scan")
          case r if r < 90 =>
            val key = (k, start)
            val got = Option(s.get(kind.key(k, start))).map(v => (v.getLong(0), v.getUTF8String(1).numBytes()))
            assert(got == working.get(key))
          case r if r < 92 =>
            // Expiry inside the version (undone by an abort): the index must follow the segments.
            p.liveMap.expire()
            val before = working.size
            expireModel()
            if (working.size < before) count("expired inside a version")
          case _ =>
            check()
        }
      }
      check()
      rnd.nextInt(10) match {
        case r if r < 7 =>
          s.commit()
          compactionBytes += s.metrics.customMetrics(InMemoryWindowStoreProvider.CompactionBytesMetric)
          expireModel()
          version += 1
          history(version) = Committed(working.toMap, stream)
        case _ =>
          s.abort()
          count("abort")
      }
      val r = p.getReadStore(version)
      assert(r.iterator().map(decode).toMap == history(version).entries, s"after round $round")
      rnd.nextInt(20) match {
        case 0 | 1 | 2 | 3 => p.doMaintenance()
        case 4 =>
          p.close()
          p = newProvider(dir, kind)
          count("restart")
        case 5 | 6 if version > 3 =>
          // Rebuilt from files; the next round's getStore goes back to the latest version.
          val older = version - 1 - rnd.nextInt(3)
          assert(p.getReadStore(older).iterator().map(decode).toMap == history(older).entries)
          count("older version loaded")
        case _ =>
      }
    }
    val final_ = p.getReadStore(version)
    for (k <- prefixes) {
      assert(final_.prefixScan(prefix(k)).map(decode).toMap == history(version).entries.filter(_._1._1 == k))
    }
    // The run went through the paths it is meant to test.
    assert(seen("abort") > 5 && seen("restart") > 2 && seen("older version loaded") > 2, seen)
    assert(seen("removed during scan") > 5 && seen("scan with results") > 20, seen)
    if (kind.windowed) assert(seen("late put dropped") > 0 && seen("expired inside a version") > 0, seen)
    assert(compactionBytes > 0, seen) // the index followed compacted segments (reanchor)
    info(seen.toSeq.sorted.map { case (k, n) => s"$k: $n" }.mkString(", ") + s", compacted bytes: $compactionBytes")
  }

  for (kind <- kinds) test(s"puts write over retired records, and prefix scans still find every key: ${kind.name}") {
    val p = newProvider(Files.createTempDirectory("prefixreuse").toString, kind)
    // Few enough that the garbage stays below what compaction waits for (64 KiB).
    def users(from: Int) = (from until from + 100).map(i => f"user-$i%03d")
    val (a, b, c) = (users(0), users(100), users(200))
    def commit(v: Long)(f: StateStore => Unit): Long = {
      val s = p.getStore(v)
      f(s)
      s.commit()
      s.metrics.customMetrics(InMemoryWindowStoreProvider.MemoryBytesMetric)
    }
    def put(s: StateStore, ks: Seq[String], v: Long): Unit = ks.foreach(k => s.put(kind.key(k, 0), value(v, 8)))
    def scans(v: Long): Map[String, Long] = {
      val r = p.getReadStore(v)
      (a ++ b ++ c).flatMap(k => r.prefixScan(prefix(k)).map(decode).toList).toMap
    }
    // Every record has the same size. Version 2 removes b and replaces a's records, whose index
    // anchors stay on the replaced ones; the commit retires both, a's last. Version 3 adds c as
    // b leaves room, writing over a's retired records: the scans of a would miss its keys had
    // their anchors not moved first.
    commit(0) { s => put(s, a, 1); put(s, b, 1) }
    val bytes = commit(1) { s => b.foreach(k => s.remove(kind.key(k, 0))); put(s, a, 2) }
    assert(commit(2) { s =>
        // A key a scan handed out is read from its live record: the puts after it leave it alone.
        val held = s.prefixScan(prefix(a(7))).next().key
        put(s, c, 3)
        assert(held.getUTF8String(0).toString == a(7))
      } == bytes, "the puts wrote over retired records: the pages did not grow")
    assert(scans(3) == (a.map(_ -> 2L) ++ c.map(_ -> 3L)).toMap)
    // An aborted version writes over retired records too, and hands them back when undone.
    assert(commit(3)(s => put(s, c, 4)) == bytes)
    val s = p.getStore(4)
    put(s, a, 9)
    s.abort()
    assert(commit(4)(s => put(s, c, 5)) == bytes)
    assert(scans(5) == (a.map(_ -> 2L) ++ c.map(_ -> 5L)).toMap)
    p.close()
  }

  private def decode(pair: UnsafeRowPair): (String, Long) =
    pair.key.getUTF8String(0).toString -> pair.value.getLong(0)

  test("windowStoreMemoryBytes counts the prefix index") {
    val kind = kinds.head
    def stored(prefixCols: Int): Long = {
      val map = new SegmentedStateMap(kind.schema, 2, prefixCols, 0L)
      for (i <- 0 until 100000) map.rawPut(kind.key(s"user-${i % 5000}", i / 5000), value(i, 8))
      assert(indexedKeys(map) == (if (prefixCols > 0) 100000 else 0))
      map.memoryBytes
    }
    val extra = stored(1) - stored(0)
    // 16 bytes per entry (anchor, hash, link), plus bucket heads and the last block's free room.
    assert(extra >= 100000L * 16 && extra <= 100000L * (16 + 4) + 8192L * 16, extra)
  }
}
