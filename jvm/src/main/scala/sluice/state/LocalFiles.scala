package sluice.state

import java.io.File
import java.nio.file.{FileAlreadyExistsException => NioFileExists, Files, FileSystemException, StandardCopyOption}
import java.util.UUID

import scala.util.control.NonFatal

import org.apache.hadoop.fs.{FileAlreadyExistsException, FileSystem, LocalFileSystem, Path, RawLocalFileSystem}

/**
 * Checkpoint files on the local file system, written with java.nio instead of Hadoop's local file
 * system.
 *
 * Why: without its native library (which Spark's distributions do not ship), Hadoop's local file
 * system starts a process for each file it creates or renames: `chmod` to set the new file's
 * permissions, `readlink` for each side of a rename, for the file and for its checksum. That is
 * tens of milliseconds a file on a small machine, more than the rest of a small store's commit
 * (bench/windowstore's `ws-sparkfiles` side writes the window store's files through Spark's manager).
 *
 * Durability is what Hadoop's local file system gives Spark: a rename within one directory, no
 * fsync (a killed process loses nothing; a power cut may lose what the OS had not written).
 *
 * Hadoop's local file system keeps a checksum beside each file (`.<name>.crc`), which is never
 * written here. A file replaced or deleted here loses its checksum too, since a stale one would fail
 * a later read through Hadoop: files written either way are read by both.
 */
private[sluice] object LocalFiles {

  /** The local file behind `path` when `fs` is the local file system (checksummed or raw). */
  def fileOf(fs: FileSystem, path: Path): Option[File] = fs match {
    case local: LocalFileSystem => Some(local.pathToFile(local.makeQualified(path)))
    case raw: RawLocalFileSystem => Some(raw.pathToFile(raw.makeQualified(path)))
    case _ => None
  }

  /** A temporary name beside `target`, hidden (a leading dot) as Spark's own temporary files are. */
  def tempFor(target: File): File = new File(target.getParentFile, s".${target.getName}.${UUID.randomUUID()}.tmp")

  /**
   * Puts the complete file `tmp` in place as `target`, in one step readers cannot see half of. With
   * `overwrite` false an existing `target` is kept and Hadoop's FileAlreadyExistsException thrown
   * (Spark's metadata logs tell a concurrent writer by it): the file is hard-linked into place, which
   * fails atomically when the name exists, where the file system can link. `tmp` is gone afterwards
   * either way.
   */
  def publish(tmp: File, target: File, overwrite: Boolean): Unit =
    try {
      if (overwrite) {
        Files.deleteIfExists(checksumOf(target))
        Files.move(tmp.toPath, target.toPath, StandardCopyOption.ATOMIC_MOVE)
      } else {
        if (target.exists()) throw exists(target, null)
        Files.deleteIfExists(checksumOf(target)) // an orphan, left by whatever deleted the file
        val linked =
          try { Files.createLink(target.toPath, tmp.toPath); true }
          catch {
            case e: NioFileExists => throw exists(target, e)
            // A file system without hard links (EPERM on Linux, or no support in java.nio).
            case _: FileSystemException | _: UnsupportedOperationException => false
          }
        // No hard links here: the check above and the rename are two steps, as in Hadoop's local rename.
        if (!linked) Files.move(tmp.toPath, target.toPath, StandardCopyOption.ATOMIC_MOVE)
      }
    } finally {
      Files.deleteIfExists(tmp.toPath)
    }

  /** Deletes `target` and its checksum if they exist. */
  def delete(target: File): Unit = {
    Files.deleteIfExists(target.toPath)
    Files.deleteIfExists(checksumOf(target))
  }

  /** Deletes what a failed write left, keeping the failure as the one to report. */
  def discard(tmp: File, failure: Throwable): Unit =
    try Files.deleteIfExists(tmp.toPath)
    catch { case NonFatal(s) => failure.addSuppressed(s) }

  private def checksumOf(target: File) = new File(target.getParentFile, s".${target.getName}.crc").toPath

  private def exists(target: File, cause: Throwable): FileAlreadyExistsException = {
    val e = new FileAlreadyExistsException(s"$target already exists")
    if (cause != null) e.initCause(cause)
    e
  }
}
