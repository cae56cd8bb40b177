package sluice.state

import java.io.{BufferedOutputStream, File, FileOutputStream, OutputStream}
import java.nio.file.Files

import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileStatus, FSDataInputStream, Path, PathFilter}

import sluice.conf.SluiceConf
import sluice.rewrites.NotApplied
import sluice.spark.CancellableOutputStream
import sluice.spark.CheckpointTypes.{CancellableFSDataOutputStream, CheckpointFileManager}
import sluice.spark.SparkSessionConf

/**
 * Spark's checkpoint file manager with the local file system's files written by [[LocalFiles]]
 * (java.nio, no process per file): the offset and commit logs, the state stores' deltas, snapshots
 * and changelogs, every file Spark writes atomically under a local checkpoint. Everything else
 * (reads, listings, deletes, other file systems) is Spark's own manager's work, the one Spark would
 * have chosen without this one.
 *
 * Installed by the plugin as `spark.sql.streaming.checkpointFileManagerClass` when
 * `spark.sluice.checkpoint.local.direct` is on; Spark builds one per directory it manages, by
 * reflection, with this constructor. Experimental (conf.json): a file system other than the local one
 * is named, with why ([[LocalCheckpointFileManager.Why]]), in one INFO line per JVM.
 */
final class LocalCheckpointFileManager(path: Path, hadoopConf: Configuration) extends CheckpointFileManager {
  import LocalCheckpointFileManager._

  private val sparksOwn: CheckpointFileManager = {
    val conf = new Configuration(hadoopConf)
    conf.unset(SparkSessionConf.CheckpointFileManagerKey)
    CheckpointFileManager.create(path, conf)
  }

  private val localFs = {
    val fs = path.getFileSystem(hadoopConf)
    if (LocalFiles.fileOf(fs, path).isDefined) Some(fs)
    else {
      // Once per file system and JVM: Spark builds a manager per directory (logs, each store partition).
      NotApplied.logOnce(s"checkpoint:${fs.getUri}",
        NotApplied.line(Name,
          Seq(s"the checkpoint files under ${fs.getUri}" ->
            Why.notLocal(fs.getClass.getName, sparksOwn.getClass.getSimpleName))))
      None
    }
  }

  private def local(p: Path): Option[File] =
    if (Option(p.toUri.getScheme).forall(_ == "file")) localFs.flatMap(LocalFiles.fileOf(_, p)) else None

  override def createAtomic(p: Path, overwriteIfPossible: Boolean): CancellableFSDataOutputStream =
    local(p) match {
      case Some(target) =>
        Files.createDirectories(target.getParentFile.toPath)
        val tmp = LocalFiles.tempFor(target)
        new AtomicLocalStream(tmp, target, overwriteIfPossible,
          new BufferedOutputStream(new FileOutputStream(tmp), BufferBytes))
      case None => sparksOwn.createAtomic(p, overwriteIfPossible)
    }

  override def open(p: Path): FSDataInputStream = sparksOwn.open(p)
  override def list(p: Path, filter: PathFilter): Array[FileStatus] = sparksOwn.list(p, filter)
  override def mkdirs(p: Path): Unit = sparksOwn.mkdirs(p)
  override def exists(p: Path): Boolean = sparksOwn.exists(p)
  override def delete(p: Path): Unit = sparksOwn.delete(p)
  override def isLocal: Boolean = sparksOwn.isLocal
  override def createCheckpointDirectory(): Path = sparksOwn.createCheckpointDirectory()
  override def close(): Unit = sparksOwn.close()
  override def toString: String = s"sluice's local checkpoint files over $sparksOwn"
}

object LocalCheckpointFileManager {
  private val BufferBytes = 64 * 1024

  /** The name of `spark.sluice.checkpoint.local.direct` in the line saying why it left files to Spark's manager. */
  val Name = "checkpoint files written directly"

  /** Why checkpoint files stay Spark's manager's to write (the texts of the INFO line). */
  object Why {
    def notLocal(fileSystem: String, sparks: String): String =
      s"they are not on the local file system ($fileSystem), so Spark's $sparks writes them"
  }

  /**
   * Why the SparkContext's settings `settings` cannot take this manager: they choose another one,
   * as a Spark setting or a Hadoop one (`spark.hadoop.`), and one of the two must go.
   */
  def refusal(settings: Map[String, String]): Option[String] = {
    val ours = classOf[LocalCheckpointFileManager].getName
    Seq(SparkSessionConf.CheckpointFileManagerKey, "spark.hadoop." + SparkSessionConf.CheckpointFileManagerKey)
      .flatMap(k => settings.get(k).map(k -> _.trim)).find(_._2 != ours).map { case (k, v) =>
        s"${SluiceConf.CheckpointLocalDirect.key}=true installs sluice's checkpoint file manager, but $k=$v " +
          s"chooses another; unset one of the two"
      }
  }

  /**
   * The file appears under its name when the stream closes, whole; a cancelled or failed stream
   * leaves no file behind. Closing or cancelling a second time does nothing (Spark's metadata log
   * cancels after a close that failed).
   */
  private final class AtomicLocalStream(tmp: File, target: File, overwrite: Boolean, out: OutputStream)
    extends CancellableOutputStream(out) {
    private var finished = false

    override def close(): Unit = synchronized {
      if (finished) return
      finished = true
      try super.close()
      catch {
        case e: Throwable =>
          LocalFiles.discard(tmp, e)
          throw e
      }
      LocalFiles.publish(tmp, target, overwrite)
    }

    override def cancel(): Unit = synchronized {
      if (finished) return
      finished = true
      try underlyingStream.close()
      catch { case NonFatal(_) => }
      Files.deleteIfExists(tmp.toPath)
    }
  }
}
