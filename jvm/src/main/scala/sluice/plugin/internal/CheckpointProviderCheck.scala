package sluice.plugin.internal

import scala.util.Try
import scala.util.control.NonFatal

import org.apache.hadoop.fs.Path
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.catalyst.streaming.WriteToStream
import org.apache.spark.sql.sluice.{SluiceStatefulNode, StatefulOperatorSupport}

import sluice.cache.internal.DelegateMarker
import sluice.conf.{SluiceConf, SluiceConfException}
import sluice.spark.CheckpointTypes.OffsetSeqLog
import sluice.spark.{SparkSessionConf, SparkSessions, SparkShim}

/**
 * A query never moves onto or off a sluice state store provider silently: `start()` fails when the
 * query keeps state, its checkpoint's offset log records a state store provider other than the one
 * its session asks for, and either of the two is sluice's (the record cache's
 * `CachingStateStoreProvider`, the window store's `InMemoryWindowStoreProvider`).
 *
 * Why: Spark pins `spark.sql.streaming.stateStore.providerClass` in every offset log entry and, when a
 * query restarts, overwrites the run's copy of the session's setting with the recorded value
 * (`OffsetSeqMetadata.setSessionConf`), logging only a warning. The session goes on reporting the
 * provider it asked for while the query runs on the checkpoint's: a user who turned the record cache
 * or the window store on would run without it, one who turned it off would keep it.
 *
 * Where: a check rule, which `start()` runs when it analyses the query's write (`WriteToStream`) in
 * the user's own session. That session's setting is exactly what was asked for when the query was
 * started (the run's copy is taken right after and is overwritten on the query's thread later, and
 * the user's session may change once `start()` returns), and the check runs before the query's thread
 * exists: `start()` itself raises, and no store opens, no offset, commit or state file is written.
 * The check reads the latest offset log entry, the one Spark restores the setting from.
 *
 * A query without state is left alone (no store reads what the provider wrote), and so is a change
 * between Spark's own providers (Spark's behaviour is not sluice's to change). A change of the record
 * cache's delegate on the same provider is refused where the store opens, by its [[DelegateMarker]].
 */
private[sluice] object CheckpointProviderCheck {
  private val ProviderKey = SparkSessionConf.ProviderClassKey
  private val DelegateKey = SluiceConf.StateStoreCacheDelegate.key
  private val WindowStoreClass = SluiceConf.ProviderClasses("in_memory_window")
  private val SluiceProviders = Set(SluiceConf.CachingProviderClass, WindowStoreClass)

  /** Check rule: the `start()` of a stateful query on a checkpoint of another provider fails. */
  def checkRule(session: SparkSession): LogicalPlan => Unit = {
    case w: WriteToStream => refusal(session, w).foreach(m => throw new SluiceConfException(m))
    case _ =>
  }

  private def refusal(session: SparkSession, w: WriteToStream): Option[String] =
    if (!keepsState(w.inputQuery)) None
    else {
      val asked = session.conf.get(ProviderKey).trim
      recorded(session, w.resolvedCheckpointLocation).flatMap { case (root, was) =>
        if (was == asked || !(SluiceProviders(was) || SluiceProviders(asked))) None
        else
          Some(message(root.toString, was, recordedDelegate(session, root, was), asked, askedDelegate(session, asked)))
      }
    }

  /**
   * The one-line refusal: the checkpoint's provider (with the record cache's delegate, where known),
   * the session's, and how to go on.
   */
  private[plugin] def message(root: String, was: String, wasDelegate: Option[String], asked: String,
      askedDelegate: Option[String]): String = {
    def over(d: Option[String]) = d.map(v => s" over $DelegateKey=$v").getOrElse("")
    s"The checkpoint at $root was written with the state store provider $ProviderKey=$was${over(wasDelegate)}, " +
      s"but this session asks for $asked${over(askedDelegate)}: Spark would restore the checkpoint's provider and " +
      s"run the query on $was, not on $asked. A checkpoint keeps the state store provider it was started with: set " +
      s"$ProviderKey=$was${wasDelegate.map(d => s" and $DelegateKey=$d").getOrElse("")} to restart this checkpoint, " +
      s"or start the query on a new checkpoint to run it on $asked"
  }

  /** Whether the plan keeps state across micro-batches (Spark's stateful operators or sluice's). */
  private def keepsState(plan: LogicalPlan): Boolean =
    plan.exists(p => StatefulOperatorSupport.isSparkStateful(p) || p.isInstanceOf[SluiceStatefulNode])

  /**
   * The checkpoint's qualified root and the provider its latest offset log entry records, as a
   * restarted query restores it; None for a new checkpoint, an entry without it, or a log this
   * cannot read (the query's own start reports what is wrong with it).
   */
  private def recorded(session: SparkSession, location: String): Option[(Path, String)] = {
    val classic = SparkSessions.classic(session)
    try {
      val root = new Path(location)
      val fs = root.getFileSystem(classic.sessionState.newHadoopConf())
      val offsets = new Path(root, "offsets")
      if (!fs.exists(offsets)) None
      else {
        val log = OffsetSeqLog(classic, offsets.toString)
        log.getLatestBatchId().flatMap(SparkShim.offsetLogEntry(log, _)).flatMap(_.conf.get(ProviderKey))
          .map(v => (fs.makeQualified(root), v.trim))
      }
    } catch { case NonFatal(_) => None }
  }

  /** The delegate the record cache's stores in the checkpoint were written with (their markers). */
  private def recordedDelegate(session: SparkSession, root: Path, provider: String): Option[String] =
    if (provider != SluiceConf.CachingProviderClass) None
    else
      try {
        val fs = root.getFileSystem(SparkSessions.classic(session).sessionState.newHadoopConf())
        // state/<operator>/<partition>/, and state/<operator>/<partition>/<store name>/ (joins)
        Seq("state/*/*/", "state/*/*/*/").iterator
          .flatMap(p => Option(fs.globStatus(new Path(root, p + DelegateMarker.FileName))).map(_.toSeq).getOrElse(Nil))
          .map { s =>
            val in = fs.open(s.getPath)
            try DelegateMarker.parse(s.getPath.toString, in.readAllBytes())
            finally in.close()
          }
          .find(_.nonEmpty)
      } catch { case NonFatal(_) => None }

  private def askedDelegate(session: SparkSession, provider: String): Option[String] =
    if (provider != SluiceConf.CachingProviderClass) None
    else Try(SluiceConf(session.conf.getAll).get(SluiceConf.StateStoreCacheDelegate)).toOption
}
