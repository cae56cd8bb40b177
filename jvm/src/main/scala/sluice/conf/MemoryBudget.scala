package sluice.conf

import org.apache.spark.SparkEnv


/** An executor's record-cache budget C split evenly over its T task slots (KIP-63: C/T per thread). */
final case class SlotBudget(
    executorId: String,
    taskSlots: Int,
    cacheMaxBytes: Long,
    cacheBytesPerSlot: Long,
    inputBufferMaxBytes: Long)

object SlotBudget {
  def split(executorId: String, cacheMaxBytes: Long, executorCores: Int, taskCpus: Int,
      inputBufferMaxBytes: Long): SlotBudget = {
    val slots = math.max(1, executorCores / math.max(1, taskCpus))
    SlotBudget(executorId, slots, cacheMaxBytes, cacheMaxBytes / slots, inputBufferMaxBytes)
  }
}

/**
 * The executor-wide budget, installed by the executor plugin. Caches on the task path ask it for
 * their slot's share; without the plugin (unit tests, a missing `spark.plugins`) the share is
 * computed from the executor's conf the same way.
 */
object MemoryBudget {
  @volatile private var installed: Option[SlotBudget] = None

  private[sluice] def install(b: SlotBudget): Unit = installed = Some(b)
  private[sluice] def uninstall(): Unit = installed = None

  def current: SlotBudget = installed.getOrElse {
    val env = Option(SparkEnv.get)
    val settings = env.map(_.conf.getAll.toSeq).getOrElse(Nil)
    val conf = SluiceConf(settings)
    val cores = env.flatMap(_.conf.getOption("spark.executor.cores")).map(_.toInt)
      .getOrElse(Runtime.getRuntime.availableProcessors())
    val cpus = env.map(_.conf.getInt("spark.task.cpus", 1)).getOrElse(1)
    SlotBudget.split(env.map(_.executorId).getOrElse("unknown"), conf.stateStoreCacheMaxBytes, cores, cpus,
      conf.inputBufferMaxBytes)
  }

  /**
   * Whether a query runs both caches, which then take half of each slot's share each: the record
   * cache when the query's provider is the caching one, the emission cache when the commit
   * interval is > 0. Both caches size themselves by this one test, so their halves add up to the
   * share.
   */
  def bothCaches(providerClass: String, commitIntervalMs: Long): Boolean =
    providerClass == SluiceConf.CachingProviderClass && commitIntervalMs > 0

  /** One cache's part of `bytes` (a slot's share or the executor's budget): half when [[bothCaches]]. */
  def cacheShare(bytes: Long, bothCaches: Boolean): Long = if (bothCaches) bytes / 2 else bytes

  /** Bytes one task slot may hold in its record cache (C/T). */
  def cacheBytesPerSlot: Long = current.cacheBytesPerSlot
}
