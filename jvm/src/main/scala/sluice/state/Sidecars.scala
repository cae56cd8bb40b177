package sluice.state

import java.nio.charset.StandardCharsets
import java.util.{Collections, UUID, WeakHashMap}

import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.json4s._
import org.json4s.JsonDSL._
import org.json4s.jackson.JsonMethods.{compact, parse, render}

import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.sluice.{SluiceStatefulNode, StatefulOperatorSupport}

import sluice.conf.SluiceConf
import sluice.spark.CheckpointTypes.CheckpointFileManager
import sluice.spark.SparkSessionConf
import sluice.spark.StateStoreTypes.HdfsProviderClass
import sluice.spark.SparkSessions.ClassicSession

/**
 * What a sluice operator's state means but the checkpoint does not say (the suppress mode and
 * limit, the buffer bound, the emission cache's interval, the window store's retention), kept
 * beside the operator's state as `<checkpoint>/state/<operator id>/_sluice_operator.json`, so that
 * `sluice.inspect` can tell when each held row becomes due, and a restart can tell how the state
 * was written where that decides whether it can be read ([[earlier]], before this run's replaces it).
 *
 * Each feature's planner says what its operator's settings are (`settings`, with a `kind`); this
 * object adds what all share (operator id, run, first batch, state store) and writes the file
 * when a query run first plans the operator, whole or not at all (a
 * temporary file renamed into place); a restart with other settings replaces it. Spark's readers
 * of the state directory look only at numbered partition directories and `_`-prefixed folders
 * they know, so the file is invisible to them.
 */
private[sluice] object Sidecars extends Logging {
  val FileName = "_sluice_operator.json"

  /** The window store's name among sluice's provider names (`SluiceConf.ProviderClasses`). */
  private val WindowStore = "in_memory_window"

  /** Operator ids already recorded, per query run (the run id instance lives as long as the run). */
  private val recorded = Collections.synchronizedMap(new WeakHashMap[UUID, java.util.Set[java.lang.Long]]())

  /**
   * Records `node`'s settings for the query run now planning it; does nothing outside a running
   * query or once recorded for this run. `rows` is the layout of the operator's state rows, recorded
   * as `stateLayoutVersion`. Fails only when the sidecar already there was written in a newer format
   * or for a newer row layout (neither is read by this sluice); otherwise a sidecar that cannot be
   * read or written is logged and `sluice.inspect` falls back to what the checkpoint alone says.
   */
  def record(session: SparkSession, node: SluiceStatefulNode, rows: FileFormat, settings: => JObject): Unit =
    try {
      StatefulOperatorSupport.streamContext(session, node).foreach { ctx =>
        val info = ctx.stateInfo
        val ids = recorded.synchronized {
          val s = recorded.get(info.queryRunId)
          if (s != null) s
          else {
            val n = Collections.synchronizedSet(new java.util.HashSet[java.lang.Long]())
            recorded.put(info.queryRunId, n)
            n
          }
        }
        if (ids.add(info.operatorId)) {
          val hadoopConf = session.asInstanceOf[ClassicSession].sessionState.newHadoopConf()
          val path = new Path(new Path(info.checkpointLocation, info.operatorId.toString), FileName)
          checkVersions(path, rows, hadoopConf)
          write(path, json(session, settings merge versions(rows), info.operatorId, info.queryRunId, ctx.batchId),
            hadoopConf)
        }
      }
    } catch {
      case e: SluiceFileFormatException => throw e
      case NonFatal(e) => logWarning(s"Could not record the settings of ${node.nodeName} for sluice.inspect", e)
    }

  /**
   * The sidecar an earlier run left beside `node`'s operator, while this run has not recorded its
   * own: what the checkpoint's state was written with. None when there is none or it cannot be read
   * ([[record]] then says why, or fails on a newer format).
   */
  def earlier(session: SparkSession, node: SluiceStatefulNode): Option[JValue] =
    try {
      StatefulOperatorSupport.streamContext(session, node).flatMap { ctx =>
        val info = ctx.stateInfo
        val ids = recorded.get(info.queryRunId)
        if (ids != null && ids.contains(info.operatorId)) None
        else {
          val path = new Path(new Path(info.checkpointLocation, info.operatorId.toString), FileName)
          read(path, session.asInstanceOf[ClassicSession].sessionState.newHadoopConf()).map(parse(_))
        }
      }
    } catch { case NonFatal(_) => None }

  private def read(path: Path, hadoopConf: Configuration): Option[String] = {
    val fm = CheckpointFileManager.create(path.getParent, hadoopConf)
    if (!fm.exists(path)) None
    else {
      val in = fm.open(path)
      try Some(new String(in.readAllBytes(), StandardCharsets.UTF_8))
      finally in.close()
    }
  }

  private def versions(rows: FileFormat): JObject =
    ("formatVersion" -> FileFormats.OperatorSidecar.current) ~ ("stateLayoutVersion" -> rows.current)

  /**
   * The sidecar's own format and its operator's row layout, when a sidecar is there: a checkpoint
   * whose state rows a newer sluice laid out must not be read with this one's layout. Absent
   * fields (sluice 0.1.0's sidecars) are version 1.
   */
  private def checkVersions(path: Path, rows: FileFormat, hadoopConf: Configuration): Unit = {
    val text =
      try read(path, hadoopConf).getOrElse(return)
      catch { case NonFatal(e) => logWarning(s"Could not read $path", e); return }
    // It holds the layout of the operator's state rows: one that cannot be read is not taken as
    // the oldest layout, it stops the query.
    val doc =
      try parse(text)
      catch {
        case NonFatal(e) => throw new SluiceFileFormatException(
            s"$path is not a readable sluice ${FileFormats.OperatorSidecar.kind} (not JSON: " +
              s"${String.valueOf(e.getMessage).linesIterator.nextOption().getOrElse(e.getClass.getName)}); " +
              "the query runs again once it is removed or restored from a copy")
      }
    checkFormat(path.toString, doc)
    rows.check(path.toString + " (stateLayoutVersion)", version(doc, "stateLayoutVersion"))
  }

  /** Fails unless `doc`, read from the sidecar `file`, is of a format this sluice reads. */
  private[sluice] def checkFormat(file: String, doc: JValue): Unit =
    FileFormats.OperatorSidecar.check(file, version(doc, "formatVersion"))

  private def version(doc: JValue, field: String): Int = doc \ field match {
    case JInt(v) => v.toInt
    case _ => 1
  }

  private def json(session: SparkSession, settings: JObject, operatorId: Long, runId: UUID,
      batchId: Long): String = {
    val common: JObject = ("operatorId" -> operatorId) ~ ("runId" -> runId.toString) ~
      ("firstBatchId" -> batchId) ~ ("stateStore" -> stateStoreJson(session))
    compact(render(settings merge common))
  }

  /** The query's state store provider and, when it is (or caches) the window store, its settings. */
  private def stateStoreJson(session: SparkSession): JObject = {
    val all = session.conf.getAll
    val provider = all.getOrElse(SparkSessionConf.ProviderClassKey, HdfsProviderClass)
    val conf = SluiceConf(all)
    val windowStore = provider == SluiceConf.ProviderClasses(WindowStore) ||
      (provider == SluiceConf.CachingProviderClass &&
      all.get(SluiceConf.StateStoreCacheDelegate.key).exists(_.trim == WindowStore))
    val ws: Option[JObject] = if (!windowStore) None
    else Some(
      ("name" -> conf.get(SluiceConf.WindowStoreName)) ~
        ("retentionMs" -> conf.get(SluiceConf.WindowStoreRetention)) ~
        ("snapshotInterval" -> conf.get(SluiceConf.WindowStoreSnapshotInterval)))
    ("providerClass" -> provider) ~ ("windowStore" -> ws)
  }

  /** Writes `text` to `path` atomically (temporary file, then rename), replacing an older file. */
  private[sluice] def write(path: Path, text: String, hadoopConf: Configuration): Unit = {
    val fm = CheckpointFileManager.create(path.getParent, hadoopConf)
    fm.mkdirs(path.getParent)
    val out = fm.createAtomic(path, overwriteIfPossible = true)
    try {
      out.write(text.getBytes(StandardCharsets.UTF_8))
      out.close()
    } catch {
      case e: Throwable =>
        out.cancel()
        throw e
    }
  }
}
