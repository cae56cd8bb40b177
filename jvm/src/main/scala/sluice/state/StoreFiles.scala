package sluice.state

import java.io.{
  BufferedInputStream, BufferedOutputStream, File, FileInputStream, FileNotFoundException, FileOutputStream,
  InputStream, IOException, OutputStream
}
import java.nio.file.Files

import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path

import sluice.spark.CheckpointTypes.CheckpointFileManager
import sluice.spark.SparkSessionConf

/**
 * The files a feature keeps in one directory of a store's checkpoint, by name (the window store's
 * deltas and snapshots, the record cache's write-behind log). A written file appears whole or not
 * at all (written under a temporary name, then renamed).
 *
 * On the local file system the files are written with java.nio ([[LocalFiles]], which says why);
 * any other file system, or a checkpoint file manager chosen with
 * `spark.sql.streaming.checkpointFileManagerClass`, goes through Spark's CheckpointFileManager.
 */
private[sluice] sealed trait StoreFiles {
  def mkdirs(): Unit
  def exists(name: String): Boolean

  /** The names in the directory; empty when it does not exist. */
  def list(): Seq[String]

  /** A buffered stream; throws FileNotFoundException when the file is missing. */
  def open(name: String): InputStream

  /** Writes the file with `body` (which may close the stream); if anything fails, `name` is left
   *  as it was and no temporary file stays behind. */
  def write(name: String)(body: OutputStream => Unit): Unit

  /** Deletes the file if it exists. */
  def delete(name: String): Unit
}

private[sluice] object StoreFiles {
  private val ManagerClassKey = SparkSessionConf.CheckpointFileManagerKey
  private val BufferBytes = 64 * 1024

  def apply(dir: Path, hadoopConf: Configuration): StoreFiles = {
    val local = if (localManager(hadoopConf)) LocalFiles.fileOf(dir.getFileSystem(hadoopConf), dir) else None
    local.map(new Local(_)).getOrElse(new ThroughSpark(dir, CheckpointFileManager.create(dir, hadoopConf)))
  }

  /** Whether local files may be written with java.nio: no checkpoint file manager is chosen. */
  private def localManager(hadoopConf: Configuration): Boolean = hadoopConf.get(ManagerClassKey) == null

  private final class Local(dir: File) extends StoreFiles {
    override def mkdirs(): Unit = Files.createDirectories(dir.toPath)
    override def exists(name: String): Boolean = new File(dir, name).isFile
    override def list(): Seq[String] = Option(dir.list()).map(_.toSeq).getOrElse(Nil)
    override def open(name: String): InputStream =
      new BufferedInputStream(new FileInputStream(new File(dir, name)), BufferBytes)

    override def write(name: String)(body: OutputStream => Unit): Unit = {
      val target = new File(dir, name)
      val tmp = LocalFiles.tempFor(target)
      try {
        val out = new BufferedOutputStream(new FileOutputStream(tmp), BufferBytes)
        try body(out)
        finally out.close()
        LocalFiles.publish(tmp, target, overwrite = true)
      } catch {
        case e: Throwable =>
          LocalFiles.discard(tmp, e)
          throw e
      }
    }

    override def delete(name: String): Unit = LocalFiles.delete(new File(dir, name))

    override def toString: String = s"local files in $dir"
  }

  private final class ThroughSpark(dir: Path, fm: CheckpointFileManager) extends StoreFiles {
    override def mkdirs(): Unit = fm.mkdirs(dir)
    override def exists(name: String): Boolean = fm.exists(new Path(dir, name))
    override def list(): Seq[String] =
      try fm.list(dir).toSeq.map(_.getPath.getName)
      catch { case _: FileNotFoundException => Nil }
    override def open(name: String): InputStream = fm.open(new Path(dir, name))

    override def write(name: String)(body: OutputStream => Unit): Unit = {
      val out = fm.createAtomic(new Path(dir, name), overwriteIfPossible = true)
      try body(out)
      catch {
        case e: Throwable =>
          try out.cancel()
          catch { case NonFatal(s) => e.addSuppressed(s) }
          throw e
      }
      out.close()
    }

    override def delete(name: String): Unit = fm.delete(new Path(dir, name))
    override def toString: String = s"$fm in $dir"
  }

  /** Fails with an IOException naming the file when `name` is missing. */
  def openExisting(files: StoreFiles, name: String, owner: Any): InputStream =
    try files.open(name)
    catch {
      case e: FileNotFoundException =>
        throw new IOException(s"$owner: cannot load state, $name is missing from $files", e)
    }
}
