package sluice.cache.internal

import java.io.{ByteArrayInputStream, ByteArrayOutputStream, DataInputStream, DataOutputStream, IOException}
import java.nio.file.Files

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.types.{LongType, StringType, StructField, StructType}
import org.apache.spark.unsafe.types.UTF8String
import org.scalatest.funsuite.AnyFunSuite

class WriteBehindLogSuite extends AnyFunSuite {
  private val keyProj = UnsafeProjection.create(StructType(Seq(StructField("k", StringType))))
  private val valueProj = UnsafeProjection.create(StructType(Seq(StructField("n", LongType), StructField("s", LongType))))
  private def key(k: String): UnsafeRow = keyProj(InternalRow(UTF8String.fromString(k))).copy()
  private def value(n: Long, s: Long): UnsafeRow = valueProj(InternalRow(n, s)).copy()

  private val entry = WriteBehindEntry(12L, 7L, Seq(
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
    val back = WriteBehindLog.decode(new DataInputStream(new ByteArrayInputStream(bytes(entry))))
    same(back, entry)
    assert(back.rows(0).value.getLong(1) == 30L && back.rows(0).key.getUTF8String(0).toString == "a")
  }

  test("a truncated or foreign file is refused, not read as fewer rows") {
    val b = bytes(entry)
    intercept[IOException](WriteBehindLog.decode(new DataInputStream(new ByteArrayInputStream(b.dropRight(4)))))
    intercept[Exception](WriteBehindLog.decode(new DataInputStream(new ByteArrayInputStream(b.take(30)))))
    intercept[IOException](WriteBehindLog.decode(new DataInputStream(new ByteArrayInputStream("PK".getBytes ++ b))))
  }

  test("versions without a file are the delegate's own; files are per version, cleared and cleaned") {
    val dir = new Path(Files.createTempDirectory("sluice-wb").toString)
    val log = new WriteBehindLog(dir, new Configuration())
    assert(log.read(3).isEmpty && log.versions().isEmpty) // a checkpoint written before write-behind
    log.clear(3) // nothing there: no error, no directory created
    assert(!new java.io.File(dir.toString, WriteBehindLog.DirName).exists())
    (10L to 14L).foreach(v => log.write(entry.copy(version = v, delegateVersion = 7L)))
    same(log.read(12).get, entry)
    assert(log.versions() == Seq(10L, 11L, 12L, 13L, 14L))
    log.write(entry.copy(version = 12L, delegateVersion = 8L, rows = Nil)) // a replay overwrites
    assert(log.read(12).get.delegateVersion == 8L && log.read(12).get.rows.isEmpty)
    log.clear(13) // version 13 became the delegate's own
    assert(log.read(13).isEmpty)
    assert(log.deleteBelow(12) == 2 && log.versions() == Seq(12L, 14L))
    // a file of the wrong version under a version's name is an error, not another version's state
    val other = new java.io.File(dir.toString, s"${WriteBehindLog.DirName}/14${WriteBehindLog.Suffix}")
    Files.write(other.toPath, bytes(entry))
    intercept[IOException](log.read(14))
  }
}
