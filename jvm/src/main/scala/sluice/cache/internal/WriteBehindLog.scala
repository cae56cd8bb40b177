package sluice.cache.internal

import java.io.{ByteArrayInputStream, DataInputStream, DataOutputStream, FileNotFoundException, IOException}
import java.util.zip.{CRC32, CheckedInputStream, CheckedOutputStream}

import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.spark.sql.catalyst.expressions.UnsafeRow

import sluice.state.{FileFormats, SluiceFileFormatException, StoreFiles}

/**
 * One row changed since the delegate version a batch version builds on: `value == null` is a removal.
 * `numFields` of key and value are recorded so the rows read back are the rows written.
 */
private[sluice] final case class LoggedRow(colFamily: String, key: UnsafeRow, value: UnsafeRow)

/**
 * What Spark's batch version `version` of a store is: the delegate's version `delegateVersion` plus
 * `rows` (every row changed since that delegate version, latest value per key).
 */
private[sluice] final case class WriteBehindEntry(version: Long, delegateVersion: Long, rows: Seq[LoggedRow])

/**
 * The write-behind log of one store: one file per batch version, `<store dir>/_sluice_writebehind/<v>.wb`,
 * written atomically through [[StoreFiles]] (java.nio on the local file system, Spark's
 * CheckpointFileManager elsewhere). A file is cumulative (it holds every row changed since its
 * delegate version, which the cache share bounds), so loading a version reads one file; a version
 * without a file is the delegate's own version of the same number (checkpoints written before
 * write-behind, or while the delegate committed every batch).
 */
private[sluice] final class WriteBehindLog(storeDir: Path, hadoopConf: Configuration) {
  import WriteBehindLog._

  val dir = new Path(storeDir, DirName)
  private lazy val files = StoreFiles(dir, hadoopConf)
  // Whether the directory may hold files: when it never did, a batch whose delegate version matches
  // its own number has no stale file to remove (one listing per provider, not per batch).
  @volatile private var mayHaveFiles: Option[Boolean] = None

  private def file(version: Long) = s"$version$Suffix"

  /** The entry of `version`, or None when it has no file (identity: delegate version == version). */
  def read(version: Long): Option[WriteBehindEntry] = {
    val in =
      try files.open(file(version))
      catch { case _: FileNotFoundException => return None }
    try {
      // Read whole (the cache share bounds a file): a length read from a damaged file is then checked
      // against the bytes that remain before anything is allocated for it.
      val e = decode(in.readAllBytes(), new Path(dir, file(version)).toString)
      if (e.version != version) throw new IOException(s"${file(version)} holds version ${e.version}")
      Some(e)
    } catch {
      case e: SluiceFileFormatException => throw e
      case NonFatal(e) => throw new IOException(
          s"${new Path(dir, file(version))} is not a readable sluice write-behind log ($files): $e", e)
    } finally in.close()
  }

  def write(entry: WriteBehindEntry): Unit = {
    if (!mayHaveFiles.contains(true)) { files.mkdirs(); mayHaveFiles = Some(true) }
    files.write(file(entry.version)) { out =>
      val data = new DataOutputStream(out)
      encode(entry, data)
      data.flush()
    }
  }

  /** Removes the file of `version` if any (its delegate version is now its own number). */
  def clear(version: Long): Unit = {
    if (mayHaveFiles.isEmpty) mayHaveFiles = Some(files.list().nonEmpty)
    if (mayHaveFiles.contains(true)) files.delete(file(version))
  }

  /** Versions that have a file, ascending. */
  def versions(): Seq[Long] = files.list().flatMap(versionOf).sorted

  // Not a checksum (`.<v>.wb.crc`) or a temporary file (`.<v>.wb.<uuid>.tmp`), which share the directory.
  private def versionOf(name: String): Option[Long] = {
    val v = name.stripSuffix(Suffix)
    if (v.length < name.length && v.nonEmpty && v.forall(_.isDigit)) Some(v.toLong) else None
  }

  /** Deletes the files of versions below `minVersion` (no retained batch version needs them). */
  def deleteBelow(minVersion: Long): Int = {
    val old = versions().filter(_ < minVersion)
    old.foreach(v => files.delete(file(v)))
    old.size
  }
}

private[sluice] object WriteBehindLog {
  val DirName = "_sluice_writebehind"
  val Suffix = ".wb"
  private val Magic = 0x534c5742 // "SLWB"
  private def Format = FileFormats.WriteBehindLog
  private val End = 0x454e4421

  /**
   * Format 2: magic, format, versions, rows, the end mark, then the CRC-32 of everything before it.
   * Format 1 (no checksum) is read still; a damaged row of it can only be caught where a length or
   * the end mark no longer fits.
   */
  def encode(e: WriteBehindEntry, out: DataOutputStream): Unit = {
    val crc = new CRC32()
    val data = new DataOutputStream(new CheckedOutputStream(out, crc))
    data.writeInt(Magic)
    data.writeInt(Format.current)
    data.writeLong(e.version)
    data.writeLong(e.delegateVersion)
    data.writeInt(e.rows.size)
    e.rows.foreach { r =>
      data.writeUTF(r.colFamily)
      writeRow(r.key, data)
      if (r.value == null) data.writeInt(-1) else writeRow(r.value, data)
    }
    data.writeInt(End)
    data.flush()
    out.writeInt(crc.getValue.toInt)
  }

  /**
   * The entry in `bytes`, read from `file` (named in errors). A damaged file fails here, before any of
   * its rows is used: its checksum (format 2) or a length beyond the bytes left does not match.
   */
  def decode(bytes: Array[Byte], file: String): WriteBehindEntry = {
    val in = new DataInputStream(new ByteArrayInputStream(bytes))
    val crc = new CRC32()
    val data = new DataInputStream(new CheckedInputStream(in, crc))
    if (data.readInt() != Magic) throw new IOException("not a sluice write-behind log")
    val format = data.readInt()
    Format.check(file, format)
    val version = data.readLong()
    val delegateVersion = data.readLong()
    val n = data.readInt()
    if (n < 0) throw new IOException(s"a count of $n rows")
    val rows = (0 until n).map { _ =>
      val cf = data.readUTF()
      val key = readRow(data, data.readInt())
      val fields = data.readInt()
      LoggedRow(cf, key, if (fields < 0) null else readRow(data, fields))
    }
    if (data.readInt() != End) throw new IOException("write-behind log truncated")
    if (format >= 2) {
      val sum = crc.getValue.toInt
      if (in.readInt() != sum) throw new IOException("write-behind log damaged (checksum mismatch)")
    }
    if (in.read() != -1) throw new IOException("bytes after the end of the write-behind log")
    WriteBehindEntry(version, delegateVersion, rows)
  }

  private def writeRow(row: UnsafeRow, out: DataOutputStream): Unit = {
    out.writeInt(row.numFields)
    out.writeInt(row.getSizeInBytes)
    out.write(row.getBytes)
  }

  private def readRow(in: DataInputStream, numFields: Int): UnsafeRow = {
    val size = in.readInt()
    // `available` is exact: decode reads the file from memory.
    if (numFields < 0 || size < 0 || size > in.available()) {
      throw new IOException(s"a row of $numFields fields and $size bytes, where ${in.available()} bytes remain")
    }
    val bytes = new Array[Byte](size)
    in.readFully(bytes)
    val row = new UnsafeRow(numFields)
    row.pointTo(bytes, bytes.length)
    row
  }
}
