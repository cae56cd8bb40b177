package sluice.suppress.internal

import java.io.{DataInputStream, DataOutputStream, EOFException}

import scala.collection.mutable

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileSystem, Path}

import org.apache.spark.sql.catalyst.expressions.UnsafeRow

import sluice.conf.SluiceConf
import sluice.state.{FileFormats, SluiceFileFormatException}

/**
 * The records of one micro-batch that may be late for a session window whose grace is below the
 * watermark delay, staged between the two places that together decide it.
 *
 * Kafka Streams judges a session record late by the session it merges into: late when that merged
 * session had closed (its end plus the grace at or before the close time), not when the record's
 * own session had. Which session a record merges into is known only after the shuffle, where the
 * key's stored sessions are, but by then Spark's aggregation has combined the records into sessions.
 * So the aggregation's input side (before any partial aggregation, [[LateRecordsExec]]) writes each
 * record whose own session had closed by the grace, a superset of the late ones since a merged session
 * ends no earlier than its records' own sessions, here, and lets it through; the session save
 * ([[sluice.sessions.internal.SessionUpdateExec]]) then finds the merged sessions that had closed and
 * writes the staged records inside them as the late records.
 *
 * Layout: `<late records>/_sluice_late_candidates/op=<operator>/batch_id=<batch>/part-<partition>`,
 * hidden from Spark's file readers by the leading underscore. A file is the magic "SLLC", the format
 * (an int), then per record the grouping key (an `UnsafeRow`, length first), the record's own
 * session start and end (microseconds) and the record's columns (an `UnsafeRow`, length first), and
 * -1 at the end. A task writes its file under a hidden name and renames it into place once complete.
 *
 * Lifetime: a batch's files are removed on the driver before the batch runs (an earlier attempt's)
 * and when a later batch runs; so they are read only by the attempt that wrote them, and a newer
 * sluice never reads an older one's.
 */
private[sluice] object LateCandidates {
  private val Magic = 0x534c4c43 // "SLLC"

  /** One staged record: its grouping key, its own session (microseconds) and its columns. */
  final case class Candidate(key: UnsafeRow, start: Long, end: Long, record: UnsafeRow)

  private def operatorDir(base: Path, operatorId: Long): Path =
    new Path(new Path(base, SluiceConf.LateCandidatesDir), s"op=$operatorId")

  def batchDir(base: Path, operatorId: Long, batchId: Long): Path =
    new Path(operatorDir(base, operatorId), s"batch_id=$batchId")

  /**
   * On the driver, before batch `batchId` runs: removes what an earlier attempt of it staged and what
   * earlier batches staged (each committed before this one runs).
   */
  def prepare(conf: Configuration, base: Path, operatorId: Long, batchId: Long): Unit = {
    val dir = operatorDir(base, operatorId)
    val fs = dir.getFileSystem(conf)
    if (fs.exists(dir)) {
      fs.listStatus(dir).map(_.getPath).filter { p =>
        p.getName.stripPrefix("batch_id=").toLongOption.forall(_ <= batchId)
      }.foreach(fs.delete(_, true))
    }
  }

  /** Task `attempt`'s staged records of `partition`, under a hidden name until `commit` renames them into place. */
  final class Writer(conf: Configuration, dir: Path, partition: Int, attempt: Long) {
    private val target = new Path(dir, f"part-$partition%05d")
    private val hidden = new Path(dir, s".${target.getName}.$attempt.tmp")
    private val fs = hidden.getFileSystem(conf)
    private val out = new DataOutputStream(fs.create(hidden, true))
    private var open = true
    out.writeInt(Magic)
    out.writeInt(FileFormats.LateCandidates.current)

    private def writeRow(row: UnsafeRow): Unit = {
      out.writeInt(row.getSizeInBytes)
      row.writeToStream(out, new Array[Byte](4096))
    }

    def write(key: UnsafeRow, start: Long, end: Long, record: UnsafeRow): Unit = {
      writeRow(key)
      out.writeLong(start)
      out.writeLong(end)
      writeRow(record)
    }

    def commit(): Unit = {
      open = false
      out.writeInt(-1)
      out.close()
      if (fs.exists(target)) fs.delete(target, false)
      if (!fs.rename(hidden, target)) throw new java.io.IOException(s"could not rename $hidden to $target")
    }

    /** Removes the hidden file of an attempt that failed. */
    def abort(): Unit = if (open) {
      open = false
      try out.close()
      finally fs.delete(hidden, false)
    }
  }

  /**
   * Every record batch `batchId` staged, by grouping key: rows of `keyFields` and `recordFields`
   * columns. Only complete files are read (hidden ones are a task still writing, or a failed one).
   */
  def read(conf: Configuration, base: Path, operatorId: Long, batchId: Long, keyFields: Int,
      recordFields: Int): Map[UnsafeRow, Seq[Candidate]] = {
    val dir = batchDir(base, operatorId, batchId)
    val fs = dir.getFileSystem(conf)
    val byKey = mutable.HashMap.empty[UnsafeRow, mutable.ArrayBuffer[Candidate]]
    if (fs.exists(dir)) {
      fs.listStatus(dir).map(_.getPath).filterNot(_.getName.startsWith(".")).sortBy(_.getName).foreach { file =>
        readFile(fs, file, keyFields, recordFields).foreach { c =>
          byKey.getOrElseUpdate(c.key, mutable.ArrayBuffer.empty) += c
        }
      }
    }
    byKey.map { case (k, cs) => k -> cs.toSeq }.toMap
  }

  private def readFile(fs: FileSystem, file: Path, keyFields: Int, recordFields: Int): Seq[Candidate] = {
    val in = new DataInputStream(fs.open(file))
    try {
      val name = file.toString
      val magic =
        try in.readInt()
        catch { case _: EOFException => -1 }
      if (magic != Magic) {
        throw new SluiceFileFormatException(s"$name is not a sluice ${FileFormats.LateCandidates.kind}")
      }
      FileFormats.LateCandidates.check(name, in.readInt())
      def readRow(fields: Int, size: Int): UnsafeRow = {
        val bytes = new Array[Byte](size)
        in.readFully(bytes)
        val row = new UnsafeRow(fields)
        row.pointTo(bytes, bytes.length)
        row
      }
      val out = mutable.ArrayBuffer.empty[Candidate]
      var size = in.readInt()
      while (size >= 0) {
        val key = readRow(keyFields, size)
        val start = in.readLong()
        val end = in.readLong()
        out += Candidate(key, start, end, readRow(recordFields, in.readInt()))
        size = in.readInt()
      }
      out.toSeq
    } finally in.close()
  }
}
