package sluice.suppress

import java.nio.file.{FileAlreadyExistsException, Files, Paths, StandardCopyOption}

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FSDataOutputStream, Path}
import org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager

/**
 * A checkpoint file manager for tests that run hundreds of short queries on the local file
 * system: files are written and renamed with java.nio. Hadoop's local file system, without its
 * native library, starts a `chmod` process for every file and directory it creates (two per
 * file with the checksum file), which dominates a micro-batch of a few rows on a busy machine.
 * Reads, listings and deletes stay Hadoop's.
 */
class NioCheckpointFileManager(path: Path, hadoopConf: Configuration)
    extends FileSystemBasedCheckpointFileManager(path, hadoopConf) {
  require(fs.getScheme == "file", s"NioCheckpointFileManager serves the local file system only, not $path")

  private def local(p: Path) = Paths.get(fs.makeQualified(p).toUri)

  override def mkdirs(p: Path): Unit = Files.createDirectories(local(p))

  override def createTempFile(p: Path): FSDataOutputStream =
    new FSDataOutputStream(Files.newOutputStream(local(p)), null)

  override def renameTempFile(src: Path, dst: Path, overwriteIfPossible: Boolean): Unit = {
    if (!overwriteIfPossible && Files.exists(local(dst))) throw new FileAlreadyExistsException(dst.toString)
    Files.move(local(src), local(dst), StandardCopyOption.ATOMIC_MOVE)
  }
}
