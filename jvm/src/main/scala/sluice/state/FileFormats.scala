package sluice.state

import java.io.IOException
import java.nio.charset.StandardCharsets

/**
 * A file sluice wrote in a format this sluice does not read (a newer one), or that is not one of
 * its files at all. The message is one line naming the file, what was found and what is read.
 */
private[sluice] final class SluiceFileFormatException(message: String) extends IOException(message)

/**
 * One kind of file (or state row layout) sluice writes: the format version this sluice writes and
 * every version it reads. A release reads every earlier released format, so `reads` only grows.
 */
private[sluice] final case class FileFormat(kind: String, current: Int, reads: Seq[Int],
    textChecksumFrom: Int = Int.MaxValue) {
  require(reads.contains(current), s"$kind: format $current is written but not read")

  /** Fails, naming `file`, when `found` is not a format this sluice reads. */
  def check(file: String, found: Int): Unit =
    if (!reads.contains(found)) throw new SluiceFileFormatException(refusal(file, found.toString))

  def refusal(file: String, found: String): String = {
    val newer = found.toIntOption.exists(_ > reads.max)
    s"$file is a sluice $kind of format $found, but this sluice reads format${if (reads.size > 1) "s" else ""} " +
      s"${reads.mkString(", ")}" +
      (if (newer) ": it was written by a newer sluice; run that release (or a later one) on this checkpoint"
       else "")
  }

  private def damaged(file: String, what: String) =
    new SluiceFileFormatException(
      s"$file is a damaged sluice $kind ($what): it was changed or cut after it was written")

  /**
   * A small text file's bytes: the header line `sluice-format <current>`, then `content`, then (from
   * format `textChecksumFrom` on) the line `crc32 <8 hex digits>`: the CRC-32 of every byte before it,
   * so that a changed byte or a cut is refused instead of read as another value. Files without the
   * header (as sluice 0.1.0 wrote them) are format 1.
   */
  def textBytes(content: String): Array[Byte] = {
    val body = s"${FileFormats.TextHeader}$current\n$content"
    if (current < textChecksumFrom) body.getBytes(StandardCharsets.UTF_8)
    else {
      val lines = (if (body.endsWith("\n")) body else body + "\n").getBytes(StandardCharsets.UTF_8)
      lines ++ f"${FileFormats.ChecksumLine}${FileFormats.crc32(lines)}%08x\n".getBytes(StandardCharsets.UTF_8)
    }
  }

  /** The content of a small text file written by `textBytes` (or without a header: format 1). */
  def readText(file: String, bytes: Array[Byte]): String = {
    val text = new String(bytes, StandardCharsets.UTF_8)
    if (!text.startsWith(FileFormats.TextHeader)) {
      // A checksummed file whose header was damaged, or one cut inside its header, is not a
      // headerless (0.1.0) one: those held a value, never nothing or a part of the header.
      if (text.contains("\n" + FileFormats.ChecksumLine) || FileFormats.TextHeader.startsWith(text)) {
        throw damaged(file, "no header")
      }
      check(file, 1)
      text
    } else {
      val nl = text.indexOf('\n')
      val found = (if (nl < 0) text else text.substring(0, nl)).stripPrefix(FileFormats.TextHeader).trim
      val version = found.toIntOption match {
        case Some(v) => check(file, v); v
        case None => throw new SluiceFileFormatException(refusal(file, s"'$found'"))
      }
      val body = if (version < textChecksumFrom) text else new String(checked(file, bytes), StandardCharsets.UTF_8)
      if (nl < 0) "" else body.substring(nl + 1)
    }
  }

  /** The bytes before the checksum line, once it matches them. */
  private def checked(file: String, bytes: Array[Byte]): Array[Byte] = {
    val line = FileFormats.ChecksumLine.length + 8 + 1
    val at = bytes.length - line
    if (at < 1 || bytes(at - 1) != '\n' || bytes.last != '\n') throw damaged(file, "no checksum line at its end")
    val last = new String(bytes, at, line - 1, StandardCharsets.US_ASCII)
    val hex = last.stripPrefix(FileFormats.ChecksumLine)
    if (hex.length == last.length || !hex.forall(c => Character.digit(c, 16) >= 0 && !c.isUpper)) {
      throw damaged(file, "no checksum line at its end")
    }
    val body = bytes.take(at)
    if (java.lang.Long.parseLong(hex, 16) != FileFormats.crc32(body)) throw damaged(file, "checksum mismatch")
    body
  }
}

/**
 * Every file and state row layout sluice writes, with its format versions: the one source of truth
 * for them (each writer and reader uses its entry here). docs/compatibility.md's "File formats"
 * lists the same, and tests/golden holds a checkpoint written in each current format.
 */
private[sluice] object FileFormats {

  /** The first line of a versioned text file. */
  val TextHeader = "sluice-format "

  /** The last line of a checksummed text file (FileFormat.textChecksumFrom), before 8 hex digits. */
  val ChecksumLine = "crc32 "

  def crc32(bytes: Array[Byte]): Long = {
    val c = new java.util.zip.CRC32
    c.update(bytes)
    c.getValue
  }

  /** `<store>/_sluice_writebehind/<version>.wb`: its format follows the magic "SLWB". */
  val WriteBehindLog: FileFormat = FileFormat("write-behind log", current = 2, reads = Seq(1, 2))

  /**
   * The window store's `<version>.wdelta` and `.wsnapshot`: the magic's last byte is the format
   * ("SLW2", "SLS2"). Format 1 was never released.
   */
  val WindowStoreFile: FileFormat = FileFormat("window store file", current = 2, reads = Seq(2))

  // The four small marker files below: format 2 ends each with a checksum line (textChecksumFrom).

  /** `<store>/_sluice_cache_delegate`: the record cache's delegate. */
  val CacheDelegateMarker: FileFormat =
    FileFormat("record cache delegate marker", current = 2, reads = Seq(1, 2), textChecksumFrom = 2)

  /** `state/<op>/_sluice_emit_cache_first_version`: the batch version the emission cache's stores start at. */
  val EmitCacheFirstVersion: FileFormat =
    FileFormat("emission cache first version", current = 2, reads = Seq(1, 2), textChecksumFrom = 2)

  /** `state/0/_sluice_fused_final`: suppress fused into the aggregation. */
  val FusedFinalMarker: FileFormat =
    FileFormat("fused final results marker", current = 2, reads = Seq(1, 2), textChecksumFrom = 2)

  /** `state/<op>/_sluice_session_plan`: the session-window plan. */
  val SessionPlan: FileFormat = FileFormat("session plan record", current = 2, reads = Seq(1, 2), textChecksumFrom = 2)

  /** `state/<op>/_sluice_operator.json` (`formatVersion`; absent: 1). Advisory, for `sluice.inspect`. */
  val OperatorSidecar: FileFormat = FileFormat("operator settings file", current = 1, reads = Seq(1))

  /** The emission cache's state rows (`EmitCacheLayout`), recorded as `stateLayoutVersion` in the sidecar. */
  val EmitCacheRows: FileFormat = FileFormat("emission cache state row layout", current = 1, reads = Seq(1))

  /** suppress's buffer and spill store rows (`SuppressStateLayout`), recorded as `stateLayoutVersion` in the sidecar. */
  val SuppressRows: FileFormat = FileFormat("suppress state row layout", current = 1, reads = Seq(1))

  /**
   * `sources/<n>/sluice-record-sizes.json` (`formatVersion`; absent: 1): statistics that only size
   * batches, so one this sluice cannot read is ignored (with a warning) and measured again.
   */
  val KafkaRecordSizes: FileFormat = FileFormat("Kafka record sizes file", current = 1, reads = Seq(1))

  /**
   * `<late records>/_sluice_late_candidates/op=<op>/batch_id=<batch>/part-<partition>`: the records of
   * one batch that may be late for a session window, kept only while the batch runs (see
   * `LateCandidates`); the magic "SLLC" is followed by the format as an int.
   */
  val LateCandidates: FileFormat = FileFormat("late record candidates file", current = 1, reads = Seq(1))

  val all: Seq[FileFormat] = Seq(WriteBehindLog, WindowStoreFile, CacheDelegateMarker, EmitCacheFirstVersion,
    FusedFinalMarker, SessionPlan, OperatorSidecar, EmitCacheRows, SuppressRows, KafkaRecordSizes, LateCandidates)
}
