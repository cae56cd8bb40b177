package sluice.conf

import org.apache.spark.{SparkEnv, TaskContext}
import org.apache.spark.sql.SparkSession

/**
 * The one way sluice code reads a `spark.sluice.*` key where it runs, on an executor or on the
 * driver. The first of these sources that holds the key decides:
 *
 *  1. in a task, the task's local property. Spark hands every job it runs for a session all of that
 *     session's `spark*` settings as local properties of the job's tasks
 *     (`SQLExecution.withSQLConfPropagated`), and a session starts with the SparkConf's settings, so
 *     a task sees the settings of the session whose query it runs, overrides included (in a task,
 *     Spark reads its own SQL settings from the same properties);
 *  2. outside a task (the driver planning a query, or asking a provider which metrics it reports),
 *     the thread's active session;
 *  3. the process's SparkConf: for a job Spark ran without a session, or a thread with neither task
 *     nor session (an executor's plugin, its maintenance thread).
 *
 * A deprecated alias counts as its key inside each source, where the new key wins. A key no source
 * holds takes its default; a value of the wrong form throws [[SluiceConfException]] naming the key,
 * the value and the expected form.
 *
 * Code that holds its query's session (the rules planning a query) reads that session's conf
 * instead: it is what step 2 finds, and what step 1 carries to the query's tasks.
 */
object ConfResolver {

  /** A source of settings: a key's value there, if it has one. */
  private[conf] type Source = String => Option[String]

  def get[T](entry: ConfEntry[T]): T = resolve(entry, sources())

  /** The key's value where a source holds it; None where it takes its default. */
  def getSet[T](entry: ConfEntry[T]): Option[T] = found(entry, sources())

  /** This thread's sources, in order. */
  private[conf] def sources(): Seq[Source] = {
    val first: Source = Option(TaskContext.get()) match {
      case Some(task) => key => Option(task.getLocalProperty(key))
      case None =>
        val session = SparkSession.getActiveSession
        key => session.flatMap(s => Option(s.conf.get(key, null)))
    }
    val sparkConf = Option(SparkEnv.get).map(_.conf)
    Seq(first, key => sparkConf.flatMap(_.getOption(key)))
  }

  private[conf] def resolve[T](entry: ConfEntry[T], sources: Seq[Source]): T = found(entry, sources)
    .getOrElse(entry.default)

  private def found[T](entry: ConfEntry[T], sources: Seq[Source]): Option[T] = {
    val keys = SluiceConf.keysOf(entry)
    sources.iterator.map(source => keys.flatMap(k => source(k).map(k -> _))).find(_.nonEmpty)
      .map(found => SluiceConf(found).get(entry))
  }
}
