package sluice.suppress.internal

import java.io.DataOutputStream
import java.nio.file.Files

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.types.{DataType, LongType, StringType}
import org.apache.spark.unsafe.types.UTF8String
import org.scalatest.funsuite.AnyFunSuite

import sluice.state.{FileFormats, SluiceFileFormatException}

/** The staged late-record candidates of session windows with a grace: written, read back, removed, refused. */
class LateCandidatesSuite extends AnyFunSuite {
  private val conf = new Configuration()

  private def row(types: Seq[DataType], values: Any*): UnsafeRow =
    UnsafeProjection.create(types.toArray)(InternalRow.fromSeq(values)).copy()

  private def key(user: String): UnsafeRow = row(Seq(StringType), UTF8String.fromString(user))
  private def record(ts: Long, user: String): UnsafeRow =
    row(Seq(LongType, StringType), ts, UTF8String.fromString(user))

  private def staged(base: Path, batch: Long, partition: Int, rows: Seq[(String, Long)]): Unit = {
    val w = new LateCandidates.Writer(conf, LateCandidates.batchDir(base, 3000, batch), partition, attempt = 7)
    rows.foreach { case (user, ts) => w.write(key(user), ts, ts + 30, record(ts, user)) }
    w.commit()
  }

  test("what the tasks of a batch stage is read back by key, each record once; hidden files are not read") {
    val base = new Path(Files.createTempDirectory("candidates").toString)
    staged(base, 4, 0, Seq("a" -> 10L, "b" -> 20L))
    staged(base, 4, 1, Seq("a" -> 15L))
    val unfinished = new LateCandidates.Writer(conf, LateCandidates.batchDir(base, 3000, 4), 2, attempt = 9)
    unfinished.write(key("a"), 99, 129, record(99, "a")) // a task still writing: hidden, not read
    val read = LateCandidates.read(conf, base, 3000, 4, keyFields = 1, recordFields = 2)
    assert(read.keySet == Set(key("a"), key("b")))
    assert(read(key("a")).map(c => (c.start, c.end, c.record.getLong(0), c.record.getUTF8String(1).toString))
      .sorted == Seq((10L, 40L, 10L, "a"), (15L, 45L, 15L, "a")))
    assert(read(key("b")).map(_.start) == Seq(20L))
    unfinished.abort()
    assert(LateCandidates.read(conf, base, 3000, 5, 1, 2).isEmpty) // a batch that staged nothing
  }

  test("before a batch runs, what it and earlier batches staged is removed; a later batch's is kept") {
    val base = new Path(Files.createTempDirectory("candidates").toString)
    Seq(3L, 4L, 5L).foreach(b => staged(base, b, 0, Seq("a" -> b)))
    LateCandidates.prepare(conf, base, 3000, 4)
    assert(LateCandidates.read(conf, base, 3000, 3, 1, 2).isEmpty)
    assert(LateCandidates.read(conf, base, 3000, 4, 1, 2).isEmpty)
    assert(LateCandidates.read(conf, base, 3000, 5, 1, 2).keySet == Set(key("a")))
  }

  test("a file of a newer format, or not a candidates file at all, is refused naming it") {
    val base = new Path(Files.createTempDirectory("candidates").toString)
    val dir = LateCandidates.batchDir(base, 3000, 1)
    val fs = dir.getFileSystem(conf)
    val newer = new DataOutputStream(fs.create(new Path(dir, "part-00000")))
    newer.writeInt(0x534c4c43)
    newer.writeInt(FileFormats.LateCandidates.current + 1)
    newer.writeInt(-1)
    newer.close()
    val e = intercept[SluiceFileFormatException](LateCandidates.read(conf, base, 3000, 1, 1, 2))
    assert(
      e.getMessage.contains("part-00000") && e.getMessage.contains(
        s"format ${FileFormats.LateCandidates.current + 1}") &&
      e.getMessage.contains("written by a newer sluice"), e.getMessage)
    val other = fs.create(new Path(LateCandidates.batchDir(base, 3000, 2), "part-00000"))
    other.write("not sluice".getBytes("UTF-8"))
    other.close()
    val e2 = intercept[SluiceFileFormatException](LateCandidates.read(conf, base, 3000, 2, 1, 2))
    assert(e2.getMessage.contains("is not a sluice late record candidates file"), e2.getMessage)
  }
}
