package sluice.cache.internal

import java.io.FileNotFoundException

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path

import sluice.conf.{SluiceConf, SluiceConfException}
import sluice.spark.CheckpointTypes.CheckpointFileManager
import sluice.state.FileFormats

/**
 * Which delegate wrote a store's files: a store's checkpoint can only be read by the provider that
 * wrote it, and `spark.sluice.statestore.cache.delegate` is a session conf that Spark does not pin
 * in the checkpoint (it pins only the provider class, here always the caching provider). The name is
 * recorded in `_sluice_cache_delegate` in the store's checkpoint directory on its first commit (a
 * name without a version, so no provider mistakes it for one of its files) and checked whenever the
 * store is opened.
 */
private[sluice] final class DelegateMarker(dir: Path, hadoopConf: Configuration) {
  private val path = new Path(dir, DelegateMarker.FileName)
  private lazy val fm = CheckpointFileManager.create(dir, hadoopConf)
  @volatile private var recorded = false

  /** Fails with a conf error when the store was written with another delegate than `configured`. */
  def check(configured: String): Unit = {
    read().foreach { was =>
      if (was != configured) throw refusal(configured, was)
      recorded = true
    }
  }

  /** The delegate the store was written with, if its first commit recorded one. */
  def written(): Option[String] = read()

  /** The refusal of delegate `configured` on a store written with `was`. */
  def refusal(configured: String, was: String): SluiceConfException = {
    val key = SluiceConf.StateStoreCacheDelegate.key
    new SluiceConfException(s"$key is '$configured' but the state in $dir was written with " +
      s"$key='$was'; a state store can only read the files its own kind of store wrote: set $key " +
      s"back to '$was' for this checkpoint (or start the query on a new checkpoint)")
  }

  /** Records `name` after the store's first successful commit (once per provider instance). */
  def commitDone(name: String): Unit = if (!recorded) {
    if (read().isEmpty) {
      val out = fm.createAtomic(path, overwriteIfPossible = true)
      try out.write(FileFormats.CacheDelegateMarker.textBytes(name + "\n"))
      catch { case e: Throwable => out.cancel(); throw e }
      out.close()
    }
    recorded = true
  }

  private def read(): Option[String] =
    try {
      val in = fm.open(path)
      try Some(DelegateMarker.parse(path.toString, in.readAllBytes()))
      finally in.close()
    } catch { case _: FileNotFoundException => None }
}

private[sluice] object DelegateMarker {
  val FileName = "_sluice_cache_delegate"

  /** The delegate name a marker's bytes record; `file` names it in the error for an unreadable format. */
  def parse(file: String, bytes: Array[Byte]): String = FileFormats.CacheDelegateMarker.readText(file, bytes).trim
}
