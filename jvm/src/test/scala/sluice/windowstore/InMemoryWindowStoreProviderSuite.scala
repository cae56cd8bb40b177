package sluice.windowstore

import java.nio.file.Files
import java.time.Duration

import org.apache.hadoop.conf.Configuration
import org.scalatest.PrivateMethodTester
import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String

import sluice.windowstore.internal.SegmentedStateMap

class InMemoryWindowStoreProviderSuite extends AnyFunSuite with PrivateMethodTester {

  /** The change logs a map holds (the open version's, and any a segment still refers to). */
  private def changeLogBytes(map: SegmentedStateMap): Long =
    map.invokePrivate(PrivateMethod[Long](Symbol("changeLogBytes"))())
  private val windowType = StructType(Seq(
      StructField("start", TimestampType), StructField("end", TimestampType)))
  private val windowedKey = StructType(Seq(StructField("k", StringType), StructField("window", windowType)))
  private val plainKey = StructType(Seq(StructField("k", StringType)))
  private val valueSchema = StructType(Seq(StructField("count", LongType)))
  private val sec = 1000000L // microseconds

  private def settings(retentionMs: Long = 0L, snapshotInterval: Int = 10) =
    WindowStoreSettings("test-store", retentionMs, snapshotInterval)

  private def newProvider(
      dir: String,
      keySchema: StructType = windowedKey,
      s: WindowStoreSettings = settings(),
      prefixCols: Int = 0,
      minBatchesToRetain: Int = 100,
      hadoopConf: Configuration = new Configuration()): InMemoryWindowStoreProvider = {
    val p = new InMemoryWindowStoreProvider(Some(s))
    val sqlConf = new SQLConf
    sqlConf.setConfString(SQLConf.MIN_BATCHES_TO_RETAIN.key, minBatchesToRetain.toString)
    val spec = if (prefixCols > 0) PrefixKeyScanStateEncoderSpec(keySchema, prefixCols)
    else NoPrefixKeyStateEncoderSpec(keySchema)
    p.init(StateStoreId(dir, 0, 0), keySchema, valueSchema, spec, useColumnFamilies = false,
      new StateStoreConf(sqlConf), hadoopConf)
    p
  }

  /** Files written with java.nio (local file system) or through Spark's checkpoint file manager. */
  private val fileKinds = Seq(
    "local files" -> (() => new Configuration()),
    "Spark's file manager" -> { () =>
      val c = new Configuration()
      c.set("spark.sql.streaming.checkpointFileManagerClass",
        "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager")
      c
    })

  private def tempDir(): String = Files.createTempDirectory("windowstore").toString

  private val windowedProj = UnsafeProjection.create(windowedKey)
  private val plainProj = UnsafeProjection.create(plainKey)
  private val valueProj = UnsafeProjection.create(valueSchema)

  private def wkey(k: String, startSec: Long): UnsafeRow =
    windowedProj(InternalRow(UTF8String.fromString(k),
        InternalRow(startSec * sec, (startSec + 10) * sec))).copy()
  private def pkey(k: String): UnsafeRow = plainProj(InternalRow(UTF8String.fromString(k))).copy()
  private def value(v: Long): UnsafeRow = valueProj(InternalRow(v)).copy()

  private def contents(store: ReadStateStore): Map[String, Long] =
    store.iterator().map { p =>
      val k = p.key.getUTF8String(0).toString
      val w = if (p.key.numFields() > 1 && !p.key.isNullAt(1)) "@" + p.key.getStruct(1, 2).getLong(0) / sec else ""
      (k + w) -> p.value.getLong(0)
    }.toMap

  private def commitVersion(p: InMemoryWindowStoreProvider, v: Long)(f: StateStore => Unit): Long = {
    val s = p.getStore(v)
    f(s)
    s.commit()
  }

  test("windowed keys are segmented by window start, window-less keys share one segment") {
    val p = newProvider(tempDir())
    val s = p.getStore(0)
    s.put(wkey("a", 0), value(1)); s.put(wkey("b", 0), value(2))
    s.put(wkey("a", 10), value(3)); s.put(wkey("a", 20), value(4))
    assert(p.liveMap.numSegments == 3)
    assert(s.get(wkey("a", 10)).getLong(0) == 3)
    assert(s.get(wkey("a", 30)) == null)
    s.remove(wkey("a", 10))
    s.commit()
    assert(p.liveMap.numSegments == 2, "an emptied segment leaves the map at commit")
    assert(s.metrics.numKeys == 3)
    assert(s.metrics.customMetrics(InMemoryWindowStoreProvider.SegmentsMetric) == 2)
    assert(s.metrics.customMetrics(InMemoryWindowStoreProvider.MemoryBytesMetric) > 0)

    val plain = newProvider(tempDir(), plainKey)
    val ps = plain.getStore(0)
    (1 to 5).foreach(i => ps.put(pkey(s"k$i"), value(i)))
    ps.commit()
    assert(plain.liveMap.numSegments == 1 && !plain.liveMap.hasWindow)
  }

  test("overwritten records are compacted after the commit, reported per version as windowStoreCompactionBytes") {
    val p = newProvider(tempDir(), plainKey)
    val keys = (0 until 1000).map(i => pkey(f"k$i%05d"))
    def compacted(s: StateStore): Long = s.metrics.customMetrics(InMemoryWindowStoreProvider.CompactionBytesMetric)
    def commitAll(version: Long, v: Long): StateStore = {
      val s = p.getStore(version)
      keys.foreach(k => s.put(k, value(v)))
      s.commit()
      s
    }
    commitAll(0, 0)
    // A record is [key size][value size][key][value], 8-byte aligned; every record here has one size.
    val record = (8 + keys.head.getSizeInBytes + value(0).getSizeInBytes + 7) / 8 * 8
    val s = p.getStore(1)
    for (v <- 1 to 3; k <- keys) s.put(k, value(v)) // garbage: 3 records per live one, past 64 KiB
    s.commit()
    assert(compacted(s) == keys.size.toLong * record, "the live records copied, once")
    assert(compacted(commitAll(2, 4)) == 0, "one more record per key is not yet twice the live bytes")
    val idle = p.getStore(3)
    idle.commit()
    assert(compacted(idle) == 0)
    assert(contents(p.getReadStore(4)).values.toSet == Set(4L))
  }

  test("segments before stream time minus retention expire; late puts are dropped and counted") {
    val p = newProvider(tempDir(), s = settings(retentionMs = 10000))
    val s = p.getStore(0)
    s.put(wkey("a", 0), value(1))
    s.put(wkey("a", 5), value(2))
    s.put(wkey("b", 5), value(3))
    assert(p.liveMap.numSegments == 2)
    s.put(wkey("a", 15), value(4)) // stream time 15s: windows at or before 5s expire when the version commits
    s.commit()
    val s1 = p.getStore(1)
    assert(contents(s1) == Map("a@15" -> 4L))
    s1.put(wkey("late", 5), value(9))
    s1.put(wkey("late", 3), value(9))
    assert(s1.get(wkey("late", 5)) == null)
    assert(s1.metrics.customMetrics(InMemoryWindowStoreProvider.ExpiredDropsMetric) == 2)
    s1.put(wkey("edge", 6), value(6)) // 6s > 15s - 10s: still live
    assert(s1.get(wkey("edge", 6)).getLong(0) == 6)
    s1.commit()
    val next = p.getStore(2)
    assert(next.metrics.customMetrics(InMemoryWindowStoreProvider.ExpiredDropsMetric) == 0,
      "the drop count is per version")
    next.abort()
  }

  test("within a version, which puts are dropped does not depend on their order") {
    val puts = Seq(("a", 30L), ("b", 12L), ("c", 25L), ("d", 50L), ("e", 41L))
    val results = puts.permutations.map { order =>
      val p = newProvider(tempDir(), s = settings(retentionMs = 10000))
      val s0 = p.getStore(0)
      s0.put(wkey("x", 31), value(0)) // stream time 31s: windows at or before 21s are expired
      s0.commit()
      val s = p.getStore(1)
      order.foreach { case (k, sec) => s.put(wkey(k, sec), value(sec)) }
      val dropped = s.metrics.customMetrics(InMemoryWindowStoreProvider.ExpiredDropsMetric)
      s.commit()
      val r = (contents(p.getStore(2)), dropped)
      p.close()
      r
    }.toSet
    // b@12 was expired when the version began; the rest are judged by that, then 50s expires <= 40s
    assert(results == Set((Map("d@50" -> 50L, "e@41" -> 41L), 1L)))
  }

  test("expiry never touches window-less keys") {
    val keySchema = StructType(Seq(StructField("k", StringType), StructField("window", windowType)))
    val p = newProvider(tempDir(), keySchema, settings(retentionMs = 1000))
    val s = p.getStore(0)
    val nullWindow = windowedProj(InternalRow(UTF8String.fromString("nw"), null)).copy()
    s.put(nullWindow, value(7))
    s.put(wkey("a", 100), value(1))
    assert(s.get(nullWindow).getLong(0) == 7)
    assert(p.liveMap.numSegments == 2)
    s.commit()
  }

  test("abort rolls back puts, removes, overwrites and expired segments") {
    val p = newProvider(tempDir(), s = settings(retentionMs = 10000))
    commitVersion(p, 0) { s =>
      s.put(wkey("a", 0), value(1)); s.put(wkey("b", 5), value(2)); s.put(wkey("c", 8), value(3))
    }
    val before = contents(p.getReadStore(1))
    val liveBefore = p.liveMap
    val s = p.getStore(1)
    s.put(wkey("a", 0), value(10)) // overwrite
    s.remove(wkey("b", 5)) // remove
    s.put(wkey("new", 8), value(4)) // insert
    s.put(wkey("z", 30), value(5)) // stream time 30s: segments 0s, 5s, 8s would expire at commit
    assert(contents(s) == Map("a@0" -> 10L, "c@8" -> 3L, "new@8" -> 4L, "z@30" -> 5L))
    s.abort()
    assert(contents(p.getReadStore(1)) == before)
    assert(p.liveMap eq liveBefore, "the live map is reused, never copied")
    assert(p.liveMap.streamTime == 8 * sec)
    // The rolled-back version can be redone and committed.
    commitVersion(p, 1)(_.put(wkey("d", 9), value(6)))
    assert(contents(p.getReadStore(2)) == before + ("d@9" -> 6L))
  }

  test("a version of more changes than one change-log chunk rolls back, and commits") {
    val p = newProvider(tempDir())
    commitVersion(p, 0)(s => (0 until 30000).foreach(i => s.put(wkey(s"k$i", i % 3), value(i))))
    val before = contents(p.getReadStore(1))
    def change(s: StateStore): Unit = (0 until 30000).foreach { i =>
      if (i % 2 == 0) s.remove(wkey(s"k$i", i % 3)) else s.put(wkey(s"k$i", i % 3), value(-i))
      s.put(wkey(s"n$i", 7), value(i))
    }
    val s = p.getStore(1)
    change(s)
    s.abort()
    assert(contents(p.getReadStore(1)) == before)
    commitVersion(p, 1)(change)
    val expected = (0 until 30000).flatMap { i =>
      (if (i % 2 == 0) None else Some(s"k$i@${i % 3}" -> -i.toLong)) ++ Some(s"n$i@7" -> i.toLong)
    }.toMap
    assert(contents(p.getReadStore(2)) == expected)
    assert(contents(newProvider(p.stateStoreId.checkpointRootLocation).getReadStore(2)) == expected)
  }

  for ((files, conf) <- fileKinds)
    test(s"$files: deltas and snapshots restore any retained version in a new provider") {
      val dir = tempDir()
      val p = newProvider(dir, s = settings(snapshotInterval = 2), hadoopConf = conf())
      val expected = scala.collection.mutable.Map[Long, Map[String, Long]]()
      for (v <- 0L until 6L) {
        commitVersion(p, v) { s =>
          s.put(wkey(s"k$v", v), value(v))
          if (v > 1) s.remove(wkey(s"k${v - 2}", v - 2))
          s.put(wkey("k0", 0), value(100 + v))
        }
        expected(v + 1) = contents(p.getReadStore(v + 1))
        if (v == 3) p.doMaintenance() // snapshot of version 4
      }
      assert(p.storeFiles.contains((4L, true)))
      assert(p.storeFiles.count(!_._2) == 6, "one delta per version")
      for (v <- 1L to 6L) {
        val fresh = newProvider(dir, hadoopConf = conf())
        assert(contents(fresh.getReadStore(v)) == expected(v), s"version $v")
      }
      // Without the deltas before the snapshot, versions after it still load.
      (1 to 4).foreach(v => java.nio.file.Files.delete(java.nio.file.Paths.get(dir, "0", "0", s"$v.wdelta")))
      val fresh = newProvider(dir, hadoopConf = conf())
      val store5 = fresh.getStore(5)
      assert(contents(store5) == expected(5))
      store5.abort()
      assert(contents(fresh.getReadStore(6)) == expected(6))
    }

  test("a window a version empties is one record in its delta, and recovers as emptied") {
    val dir = tempDir()
    val p = newProvider(dir)
    commitVersion(p, 0) { s =>
      (0 until 2000).foreach(i => s.put(wkey(f"user-$i%05d", 0), value(i)))
      (0 until 10).foreach(i => s.put(wkey(s"u$i", 10), value(i)))
    }
    // Version 2: window 0 evicted key by key as Spark's append-mode save does (a key put and
    // removed within the version too); window 10 loses one key and gains one.
    commitVersion(p, 1) { s =>
      s.put(wkey("late", 0), value(-1))
      s.iterator().map(_.key.copy()).toList.filter(k => k.getStruct(1, 2).getLong(0) == 0L).foreach(k => s.remove(k))
      s.remove(wkey("u3", 10))
      s.put(wkey("u99", 10), value(99))
    }
    val expected = (0 until 10).filter(_ != 3).map(i => s"u$i@10" -> i.toLong).toMap + ("u99@10" -> 99L)
    assert(contents(p.getReadStore(2)) == expected)
    val delta = java.nio.file.Files.size(java.nio.file.Paths.get(dir, "0", "0", "2.wdelta"))
    val perKey = java.nio.file.Files.size(java.nio.file.Paths.get(dir, "0", "0", "1.wdelta")) / 2010
    assert(delta < 20 * perKey,
      s"version 2's delta is $delta bytes; one removal per key would be about ${2000 * perKey}")
    val fresh = newProvider(dir)
    assert(contents(fresh.getReadStore(2)) == expected)
    assert(fresh.liveMap.numSegments == 1)
    assert(contents(fresh.getReadStore(1)).size == 2010)
  }

  for ((files, conf) <- fileKinds)
    test(s"$files: maintenance deletes files not needed for minBatchesToRetain versions") {
      val dir = tempDir()
      val p = newProvider(dir, s = settings(snapshotInterval = 3), minBatchesToRetain = 2, hadoopConf = conf())
      for (v <- 0L until 10L) {
        commitVersion(p, v)(s => s.put(wkey(s"k$v", v), value(v)))
        p.doMaintenance()
      }
      val files = p.storeFiles
      assert(files.filter(_._2).map(_._1).nonEmpty)
      assert(files.map(_._1).min > 1, s"old files deleted: $files")
      // The oldest retained version (10 - 2) still loads.
      val fresh = newProvider(dir, hadoopConf = conf())
      assert(contents(fresh.getReadStore(8)).size == 8)
      assert(contents(fresh.getReadStore(10)).size == 10)
    }

  test("a snapshot written while the next batch changes the store holds the version it froze") {
    val dir = tempDir()
    val conf = new Configuration()
    conf.set("spark.sql.streaming.checkpointFileManagerClass", classOf[PausingSnapshotFileManager].getName)
    val p = newProvider(dir, s = settings(snapshotInterval = 2), hadoopConf = conf)
    for (v <- 0L until 2L) commitVersion(p, v)(s => s.put(wkey(s"k$v", v), value(v)))
    val frozen = contents(p.getReadStore(2))
    PausingSnapshotFileManager.reset()
    val maintenance = new Thread(() => p.doMaintenance())
    maintenance.start()
    // The maintenance thread has frozen version 2 and is about to write its snapshot: the next
    // batch overwrites, removes and adds keys of that version meanwhile.
    assert(PausingSnapshotFileManager.writing.await(60, java.util.concurrent.TimeUnit.SECONDS))
    commitVersion(p, 2) { s =>
      s.put(wkey("k0", 0), value(100)); s.remove(wkey("k1", 1)); s.put(wkey("k2", 2), value(2))
    }
    // Records of the same size in the same windows: puts would write over the records version 3
    // replaced or removed, which the snapshot still reads, were they not held back.
    commitVersion(p, 3)(s => (0L to 2L).foreach(w => s.put(wkey(s"j$w", w), value(-w))))
    PausingSnapshotFileManager.resume.countDown()
    maintenance.join(60000)
    assert(!maintenance.isAlive)
    assert(p.storeFiles.contains((2L, true)), p.storeFiles)
    // Version 2 from its snapshot alone (the deltas before it gone), and the versions on top.
    (1 to 2).foreach(v => java.nio.file.Files.delete(java.nio.file.Paths.get(dir, "0", "0", s"$v.wdelta")))
    assert(contents(newProvider(dir).getReadStore(2)) == frozen)
    assert(contents(newProvider(dir).getReadStore(3)) == Map("k0@0" -> 100L, "k2@2" -> 2L))
    val v4 = Map("k0@0" -> 100L, "k2@2" -> 2L, "j0@0" -> 0L, "j1@1" -> -1L, "j2@2" -> -2L)
    assert(contents(newProvider(dir).getReadStore(4)) == v4)
    assert(contents(p.getReadStore(4)) == v4)
  }

  test("a replayed batch rebuilds the older version and overwrites the newer one") {
    val dir = tempDir()
    val p = newProvider(dir)
    commitVersion(p, 0)(s => s.put(wkey("a", 0), value(1)))
    commitVersion(p, 1)(s => { s.put(wkey("a", 0), value(2)); s.put(wkey("b", 0), value(5)) })
    assert(p.loadedVersion == 2)
    val replay = p.getStore(1)
    assert(contents(replay) == Map("a@0" -> 1L))
    replay.put(wkey("a", 0), value(3))
    replay.commit()
    assert(contents(p.getReadStore(2)) == Map("a@0" -> 3L))
    assert(contents(newProvider(dir).getReadStore(2)) == Map("a@0" -> 3L))
  }

  test("a delta or snapshot damaged at any byte, or cut at any length, is refused naming it, never misread") {
    // Every file is LZ4 blocks (one here: 256 KiB each), each with a checksum of its content, then
    // LZ4's empty end block (21 bytes), which the store never reads. A flipped byte is refused, or
    // decodes to the same content (the block token's compression-level bits, a match LZ4 resolves
    // to equal bytes, the end block), which must then read back the same rows. Every cut inside
    // the content is refused; a cut inside the end block reads back the same rows.
    val dir = tempDir()
    val p = newProvider(dir, s = settings(snapshotInterval = 2))
    commitVersion(p, 0)(s => (0 until 3).foreach(i => s.put(wkey(s"k$i", i), value(i))))
    commitVersion(p, 1) { s => s.remove(wkey("k1", 1)); s.put(wkey("k0", 0), value(7)) }
    p.doMaintenance() // snapshot of version 2
    commitVersion(p, 2)(s => s.put(wkey("k9", 9), value(9)))
    val store = java.nio.file.Paths.get(dir, "0", "0")
    val expected = contents(newProvider(dir).getReadStore(3))
    assert(expected == Map("k0@0" -> 7L, "k2@2" -> 2L, "k9@9" -> 9L))
    val damaged = Seq("2.wsnapshot", "3.wdelta")
    assert(damaged.forall(f => java.nio.file.Files.exists(store.resolve(f))), p.storeFiles)
    val EndBlock = 21
    for (name <- damaged) {
      val file = store.resolve(name)
      val original = java.nio.file.Files.readAllBytes(file)
      val content = original.length - EndBlock
      val flips = for (i <- original.indices; m <- Seq(0x01, 0x80, 0xff))
        yield (s"byte $i ^ $m", original.updated(i, (original(i) ^ m).toByte), None)
      val cuts = (0 until original.length).map(n => (s"cut to $n bytes", original.take(n), Some(n < content)))
      try {
        for ((how, bytes, mustRefuse) <- flips ++ cuts) {
          java.nio.file.Files.write(file, bytes)
          scala.util.Try(contents(newProvider(dir).getReadStore(3))) match {
            case scala.util.Success(rows) =>
              assert(!mustRefuse.contains(true), s"$name, $how: read, not refused")
              assert(rows == expected, s"$name, $how: read as other rows")
            case scala.util.Failure(e) =>
              assert(!mustRefuse.contains(false), s"$name, $how: a change the store never reads was refused: $e")
              val named = Iterator.iterate[Throwable](e)(_.getCause).takeWhile(_ != null)
                .exists(t => String.valueOf(t.getMessage).contains(name))
              assert(named, s"$name, $how: refused without naming the file: $e")
          }
        }
      } finally java.nio.file.Files.write(file, original)
    }
    assert(contents(newProvider(dir).getReadStore(3)) == expected)
  }

  test("a version replayed from a snapshot (snapshotStartBatchId) equals the version loaded; no snapshot, refused") {
    val dir = tempDir()
    val p = newProvider(dir, s = settings(snapshotInterval = 2))
    for (v <- 0L until 5L) {
      commitVersion(p, v) { s => s.put(wkey(s"k$v", v), value(v)); if (v == 3) s.remove(wkey("k1", 1)) }
      p.doMaintenance()
    }
    val snapshots = p.storeFiles.filter(_._2).map(_._1)
    assert(snapshots.nonEmpty, p.storeFiles)
    val snap = snapshots.min
    val fresh = newProvider(dir, s = settings(snapshotInterval = 2))
    val replayed = fresh.replayReadStateFromSnapshot(snap, 5L)
    assert(contents(replayed) == contents(newProvider(dir).getReadStore(5)))
    assert(contents(replayed) == Map("k0@0" -> 0L, "k2@2" -> 2L, "k3@3" -> 3L, "k4@4" -> 4L))
    replayed.abort()
    val missing = (1L to 5L).find(v => !snapshots.contains(v)).get
    val e = intercept[IllegalStateException](newProvider(dir).replayReadStateFromSnapshot(missing, 5L))
    assert(e.getMessage.contains(s"no snapshot of version $missing ($missing.wsnapshot)"))
  }

  test("stream time and expiry survive recovery") {
    val dir = tempDir()
    val p = newProvider(dir, s = settings(retentionMs = 10000))
    commitVersion(p, 0)(s => { s.put(wkey("a", 0), value(1)); s.put(wkey("b", 20), value(2)) })
    val fresh = newProvider(dir, s = settings(retentionMs = 10000))
    val s = fresh.getStore(1)
    assert(fresh.liveMap.streamTime == 20 * sec)
    s.put(wkey("late", 10), value(1))
    assert(s.get(wkey("late", 10)) == null)
    assert(contents(s) == Map("b@20" -> 2L))
    s.abort()
  }

  test("prefix scan over session-window keys, also after removes and expiry") {
    val sessionKey = StructType(Seq(StructField("k", StringType), StructField("session_window", windowType)))
    val p = newProvider(tempDir(), sessionKey, settings(retentionMs = 100000), prefixCols = 1)
    val prefixProj = UnsafeProjection.create(StructType(Seq(StructField("k", StringType))))
    def prefix(k: String) = prefixProj(InternalRow(UTF8String.fromString(k))).copy()
    val s = p.getStore(0)
    s.put(wkey("a", 0), value(1)); s.put(wkey("a", 50), value(2)); s.put(wkey("b", 50), value(3))
    assert(s.prefixScan(prefix("a")).map(_.value.getLong(0)).toSet == Set(1L, 2L))
    s.prefixScan(prefix("a")).foreach(pair => s.remove(pair.key))
    assert(s.prefixScan(prefix("a")).isEmpty)
    s.put(wkey("b", 0), value(4))
    s.put(wkey("c", 200), value(5)) // expires 0s and 50s when the version commits
    s.commit()
    val next = p.getStore(1)
    assert(next.prefixScan(prefix("b")).isEmpty && next.prefixScan(prefix("a")).isEmpty)
    assert(next.prefixScan(prefix("c")).map(_.value.getLong(0)).toSet == Set(5L))
    next.abort()
  }

  test("keys can be removed while iterating") {
    val p = newProvider(tempDir())
    val s = p.getStore(0)
    for (i <- 0 until 100) s.put(wkey(s"k$i", i % 7), value(i))
    s.iterator().foreach(pair => if (pair.value.getLong(0) % 2 == 0) s.remove(pair.key))
    assert(contents(s).size == 50)
    s.commit()
  }

  test("a version's change log is counted while open and let go when it commits or rolls back") {
    val n = 100000
    def fill(map: SegmentedStateMap, put: (UnsafeRow, UnsafeRow) => Unit, v: Long): Unit =
      for (i <- 0 until n) put(wkey(s"k${i % 5000}", (i / 5000) * 10L), value(v + i))
    val plain = new SegmentedStateMap(windowedKey, 1, 0, 0L) // the same state, written without versions
    fill(plain, plain.rawPut, 0L)
    val map = new SegmentedStateMap(windowedKey, 1, 0, 0L)
    map.begin()
    fill(map, map.put, 0L)
    val logBytes = 24L * n // a segment reference, two locations and a size per change
    assert(map.memoryBytes >= plain.memoryBytes + logBytes)
    map.commit(java.io.OutputStream.nullOutputStream())
    assert(map.memoryBytes == plain.memoryBytes)
    map.begin()
    fill(map, map.put, 1L) // overwrites every key
    assert(changeLogBytes(map) >= logBytes)
    map.rollback()
    // (the table side of memoryBytes moves on a rollback: the overwrites' records are garbage now)
    assert(changeLogBytes(map) == 0L)
    assert(map.numKeys == n)
  }

  test("Stores.inMemoryWindowStore validates as Kafka does") {
    def err(f: => Any) = intercept[IllegalArgumentException](f).getMessage
    val m = Duration.ofMinutes(1)
    assert(intercept[NullPointerException](Stores.inMemoryWindowStore(null, m, m, m)).getMessage ==
      "name cannot be null")
    assert(err(Stores.inMemoryWindowStore("s", m.negated(), m, m)) == "retentionPeriod cannot be negative")
    assert(err(Stores.inMemoryWindowStore("s", m, m.negated(), m)) == "windowSize cannot be negative")
    assert(err(Stores.inMemoryWindowStore("s", m, m, m.negated())) == "gracePeriod cannot be negative")
    assert(err(Stores.inMemoryWindowStore("s", m, m.multipliedBy(2), m)) ==
      "The retention period of the window store s must be no smaller than its window size. " +
      "Got size=[PT2M], retention=[PT1M]")
    assert(err(Stores.inMemoryWindowStore("s", m, m, m.multipliedBy(3))) ==
      "The grace period of the window store s must not exceed its retention period. " +
      "Got grace period=[PT3M], retention=[PT1M]")
    val supplier = Stores.inMemoryWindowStore("s", Duration.ofHours(1), m, Duration.ofSeconds(30))
    assert(supplier.settings("spark.sql.streaming.stateStore.providerClass") ==
      classOf[InMemoryWindowStoreProvider].getName)
    val parsed = WindowStoreSettings(supplier.settings)
    assert(parsed == WindowStoreSettings("s", 3600000L, 10))
  }
}

/** Spark's file manager, pausing before it writes a snapshot file until the test resumes it. */
class PausingSnapshotFileManager(path: org.apache.hadoop.fs.Path, hadoopConf: Configuration)
  extends org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager(path,
    hadoopConf) {
  override def createAtomic(p: org.apache.hadoop.fs.Path, overwriteIfPossible: Boolean)
      : org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.CancellableFSDataOutputStream = {
    if (p.getName.endsWith(".wsnapshot")) {
      PausingSnapshotFileManager.writing.countDown()
      PausingSnapshotFileManager.resume.await(60, java.util.concurrent.TimeUnit.SECONDS)
    }
    super.createAtomic(p, overwriteIfPossible)
  }
}

object PausingSnapshotFileManager {
  @volatile var writing = new java.util.concurrent.CountDownLatch(1)
  @volatile var resume = new java.util.concurrent.CountDownLatch(1)
  def reset(): Unit = {
    writing = new java.util.concurrent.CountDownLatch(1)
    resume = new java.util.concurrent.CountDownLatch(1)
  }
}
