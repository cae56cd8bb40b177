package sluice.cache.internal

import java.io.{ByteArrayOutputStream, DataOutputStream, File, IOException}
import java.nio.file.Files

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.types.{LongType, StringType, StructField, StructType}
import org.apache.spark.unsafe.types.UTF8String
import org.scalatest.funsuite.AnyFunSuite

import sluice.state.{FileFormats, SluiceFileFormatException, StoreFilesSuite}

class WriteBehindLogSuite extends AnyFunSuite {
  private val keyProj = UnsafeProjection.create(StructType(Seq(StructField("k", StringType))))
  private val valueProj =
    UnsafeProjection.create(StructType(Seq(StructField("n", LongType), StructField("s", LongType))))
  private def key(k: String): UnsafeRow = keyProj(InternalRow(UTF8String.fromString(k))).copy()
  private def value(n: Long, s: Long): UnsafeRow = valueProj(InternalRow(n, s)).copy()

  private val entry = WriteBehindEntry(12L, 7L,
    Seq(
      LoggedRow("default", key("a"), value(3, 30)),
      LoggedRow("default", key("b"), null), // removed since delegate version 7
      LoggedRow("other", key("a"), value(1, 2))))

  private def same(a: WriteBehindEntry, b: WriteBehindEntry): Unit = {
    assert(a.version == b.version && a.delegateVersion == b.delegateVersion && a.rows.size == b.rows.size)
    a.rows.zip(b.rows).foreach { case (x, y) =>
      assert(x.colFamily == y.colFamily && x.key == y.key && x.key.numFields == y.key.numFields)
      assert(x.value == y.value && Option(x.value).map(_.numFields) == Option(y.value).map(_.numFields))
    }
  }

  private def bytes(e: WriteBehindEntry): Array[Byte] = {
    val out = new ByteArrayOutputStream
    val data = new DataOutputStream(out)
    WriteBehindLog.encode(e, data)
    data.flush()
    out.toByteArray
  }

  test("an entry reads back as written: versions, column families, rows and removals") {
    val back = WriteBehindLog.decode(bytes(entry), "12.wb")
    same(back, entry)
    assert(back.rows(0).value.getLong(1) == 30L && back.rows(0).key.getUTF8String(0).toString == "a")
  }

  test("a truncated or foreign file is refused, not read as fewer rows") {
    val b = bytes(entry)
    intercept[IOException](WriteBehindLog.decode(b.dropRight(4), "f"))
    intercept[IOException](WriteBehindLog.decode(b.take(30), "f"))
    intercept[IOException](WriteBehindLog.decode("PK".getBytes ++ b, "f"))
  }

  private def decodeBytes(b: Array[Byte]): WriteBehindEntry = WriteBehindLog.decode(b, "f")

  test("a flipped byte anywhere, or a cut at any offset, is refused: never read as other rows") {
    val b = bytes(entry)
    for (i <- b.indices; flip <- Seq(0x01, 0x80, 0xff)) {
      val damaged = b.clone()
      damaged(i) = (damaged(i) ^ flip).toByte
      val e = intercept[Exception](decodeBytes(damaged))
      assert(e.isInstanceOf[IOException] || e.isInstanceOf[SluiceFileFormatException], s"byte $i ^ $flip: $e")
    }
    for (n <- 0 until b.length) intercept[IOException](decodeBytes(b.take(n)))
    intercept[IOException](decodeBytes(b :+ 0.toByte)) // nothing may follow the checksum
  }

  test("a file of format 1 (no checksum, as sluice 0.1.0 wrote it) reads as written") {
    val b = bytes(entry)
    b(7) = 1 // the format version: the int after the magic
    same(decodeBytes(b.dropRight(4)), entry) // without the checksum
    intercept[IOException](decodeBytes(b)) // format 1 has no checksum to follow it
  }

  test("a file of a newer format fails naming the file, the format found and the formats read") {
    val b = bytes(entry)
    b(7) = 9 // the format version: the int after the magic
    val e = intercept[SluiceFileFormatException](
      WriteBehindLog.decode(b, "/ckpt/12.wb"))
    assert(e.getMessage == "/ckpt/12.wb is a sluice write-behind log of format 9, but this sluice reads formats " +
      s"${FileFormats.WriteBehindLog.reads.mkString(", ")}: it was written by a newer sluice; run that release " +
      "(or a later one) on this checkpoint")
  }

  for ((kind, conf) <- StoreFilesSuite.kinds) {
    test(s"$kind: versions without a file are the delegate's own; files are per version, cleared and cleaned") {
      val dir = new Path(Files.createTempDirectory("sluice-wb").toUri)
      val log = new WriteBehindLog(dir, conf())
      assert(log.read(3).isEmpty && log.versions().isEmpty) // a checkpoint written before write-behind
      log.clear(3) // nothing there: no error, no directory created
      assert(!new File(dir.toUri.getPath, WriteBehindLog.DirName).exists())
      (10L to 14L).foreach(v => log.write(entry.copy(version = v, delegateVersion = 7L)))
      same(log.read(12).get, entry)
      assert(log.versions() == Seq(10L, 11L, 12L, 13L, 14L))
      log.write(entry.copy(version = 12L, delegateVersion = 8L, rows = Nil)) // a replay overwrites
      assert(log.read(12).get.delegateVersion == 8L && log.read(12).get.rows.isEmpty)
      log.clear(13) // version 13 became the delegate's own
      assert(log.read(13).isEmpty)
      assert(log.deleteBelow(12) == 2 && log.versions() == Seq(12L, 14L))
      // a file of the wrong version under a version's name is an error, not another version's state
      val logDir = new File(dir.toUri.getPath, WriteBehindLog.DirName)
      Files.write(new File(logDir, s"14${WriteBehindLog.Suffix}").toPath, bytes(entry))
      Files.deleteIfExists(new File(logDir,
          s".14${WriteBehindLog.Suffix}.crc").toPath) // else Hadoop calls it corrupt first
      val e = intercept[IOException](log.read(14))
      assert(e.getMessage.contains(s"14${WriteBehindLog.Suffix} holds version 12"), e.getMessage)
    }
  }

  test("a log Spark's checkpoint file manager wrote (sluice before its java.nio path) loads and is cleaned") {
    val dir = new Path(Files.createTempDirectory("sluice-wb").toUri)
    val before = new WriteBehindLog(dir, StoreFilesSuite.throughSpark())
    (10L to 12L).foreach(v => before.write(entry.copy(version = v)))
    val logDir = new File(dir.toUri.getPath, WriteBehindLog.DirName)
    assert(logDir.list().count(_.endsWith(".crc")) == 3)
    val now = new WriteBehindLog(dir, new Configuration())
    assert(now.versions() == Seq(10L, 11L, 12L))
    same(now.read(11).get, entry.copy(version = 11L))
    now.write(entry.copy(version = 12L, delegateVersion = 9L)) // a replay replaces a file and its checksum
    assert(before.read(12).get.delegateVersion == 9L)
    assert(now.deleteBelow(12) == 2) // maintenance
    now.clear(12)
    assert(logDir.list().isEmpty, logDir.list().mkString(", "))
  }
}
