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

  /** Task slots of an executor: its cores over the cores a task takes, at least one. */
  def slots(executorCores: Int, taskCpus: Int): Int = math.max(1, executorCores / math.max(1, taskCpus))

  def of(executorId: String, taskSlots: Int, cacheMaxBytes: Long, inputBufferMaxBytes: Long): SlotBudget =
    SlotBudget(executorId, taskSlots, cacheMaxBytes, cacheMaxBytes / taskSlots, inputBufferMaxBytes)
}

/**
 * The budget the running task's caches size themselves by. The executor's task slots T are the
 * executor's own, installed by the executor plugin (without the plugin, in unit tests or with
 * `spark.plugins` unset, counted from the executor's conf the same way); C and the input bound are
 * settings, read through [[ConfResolver]] like every other key, so a task runs under its query's
 * session.
 */
object MemoryBudget {
  private final case class Executor(id: String, taskSlots: Int)
  @volatile private var installed: Option[Executor] = None

  private[sluice] def install(executorId: String, taskSlots: Int): Unit =
    installed = Some(Executor(executorId, taskSlots))
  private[sluice] def uninstall(): Unit = installed = None

  private def executor: Executor = installed.getOrElse {
    val env = Option(SparkEnv.get)
    val cores = env.flatMap(_.conf.getOption("spark.executor.cores")).map(_.toInt)
      .getOrElse(Runtime.getRuntime.availableProcessors())
    val cpus = env.map(_.conf.getInt("spark.task.cpus", 1)).getOrElse(1)
    Executor(env.map(_.executorId).getOrElse("unknown"), SlotBudget.slots(cores, cpus))
  }

  /** The executor's task slots T. */
  def taskSlots: Int = executor.taskSlots

  /** The running task's budget: the executor's T, C and the input bound as the task resolves them. */
  def current: SlotBudget = {
    val e = executor
    SlotBudget.of(e.id, e.taskSlots, ConfResolver.get(SluiceConf.StateStoreCacheMaxBytes),
      ConfResolver.get(SluiceConf.InputBufferMaxBytes))
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
  def cacheBytesPerSlot: Long = ConfResolver.get(SluiceConf.StateStoreCacheMaxBytes) / taskSlots

  /**
   * Bytes the running task's record cache may hold: the slot's share C/T, halved when the query also
   * runs emission caches (its commit interval `commitIntervalMs` is > 0; the record cache runs, as
   * it asks), which take the other half.
   */
  def recordCacheBytes(commitIntervalMs: Long): Long =
    cacheShare(cacheBytesPerSlot, bothCaches(SluiceConf.CachingProviderClass, commitIntervalMs))
}
