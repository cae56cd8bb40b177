package sluice.state.conformance

import org.apache.spark.TaskContext
import org.apache.spark.sql.sluicetest.SparkTestAccess
import org.apache.spark.sql.execution.streaming.state._

import sluice.cache.CachingStateStoreProvider
import sluice.conf.SluiceConf
import sluice.spark.{OpenOptions, ProviderSpec}

/**
 * sluice's record cache exactly as shipped, with the environment an executor gives it: the
 * provider's calls that read the task (init picks the delegate, every open takes the slot cache
 * and the commit interval) run inside one task context carrying the query's settings as local
 * properties, as a task of a query with those settings would. The task ends when the provider
 * closes. Store operations themselves (put, get, commit, abort...) run on the caller's thread
 * outside the context, so Spark's suite can still change its session conf (withSQLConf) in between.
 */
class TaskScopedCachingProvider(delegateName: String, commitIntervalMs: Long) extends CachingStateStoreProvider {
  private val task: TaskContext = SparkTestAccess.newContext(0,
    Map(
      SluiceConf.StateStoreCacheDelegate.key -> delegateName,
      SluiceConf.CommitIntervalMs.key -> commitIntervalMs.toString))
  private var ended = false

  override protected def setUp(spec: ProviderSpec): Unit = SparkTestAccess.within(task)(super.setUp(spec))

  override protected def openStore(version: Long, ckptId: Option[String], options: OpenOptions): StateStore =
    SparkTestAccess.within(task)(super.openStore(version, ckptId, options))

  override def getReadStore(version: Long, uniqueId: Option[String]): ReadStateStore =
    SparkTestAccess.within(task)(super.getReadStore(version, uniqueId))

  override protected def upgradeStore(readStore: ReadStateStore, version: Long, uniqueId: Option[String],
      options: OpenOptions): StateStore =
    SparkTestAccess.within(task)(super.upgradeStore(readStore, version, uniqueId, options))

  override def close(): Unit = {
    try if (!ended) { ended = true; SparkTestAccess.complete(task) }
    finally super.close()
  }
}
