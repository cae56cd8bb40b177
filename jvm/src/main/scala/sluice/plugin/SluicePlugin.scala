package sluice.plugin

import java.util.{Map => JMap}

import scala.jdk.CollectionConverters._

import com.codahale.metrics.Gauge
import org.apache.spark.SparkContext
import org.apache.spark.api.plugin.{DriverPlugin, ExecutorPlugin, PluginContext, SparkPlugin}
import org.slf4j.LoggerFactory

import sluice.cache.CachingStateStoreProvider
import sluice.cache.internal.SlotCaches
import sluice.conf.{MemoryBudget, SlotBudget, SluiceConf, SluiceConfException}
import sluice.spark.{SessionConf, SparkVersions}
import sluice.state.LocalCheckpointFileManager
import sluice.windowstore.InMemoryWindowStoreProvider

/**
 * The Spark plugin (`spark.plugins=sluice.plugin.SluicePlugin`).
 *
 * Driver part: when the SparkContext starts, refuses a Spark minor other than the one this jar is
 * built for, validates every `spark.sluice.*` key (a key sluice removed fails with when and why), and
 * the session's state store conf where a sluice provider would refuse it, so a bad value fails startup
 * instead of a query minutes later; installs sluice's checkpoint file manager where
 * `spark.sluice.checkpoint.local.direct` asks for it; logs one warning naming the experimental
 * rewrites that are on.
 * Executor part: owns the executor-wide record-cache budget and splits it over the task slots.
 */
class SluicePlugin extends SparkPlugin {
  override def driverPlugin(): DriverPlugin = new SluiceDriverPlugin
  override def executorPlugin(): ExecutorPlugin = new SluiceExecutorPlugin
}

object SluicePlugin {

  /** Key of the driver's view of executor cores, handed to executors through the plugin's extra conf. */
  private[plugin] val ExecutorCoresKey = "executorCores"

  /**
   * What the first store of the session's state store provider would refuse about the session's
   * conf (sluice's providers under state store checkpoint format 2), in the provider's own words:
   * the driver refuses it at start. A query that sets its provider or format in its session is
   * refused by the store when it opens, with the same message.
   */
  private[plugin] def stateStoreRefusal(settings: Map[String, String], conf: SluiceConf): Option[String] = {
    val format = settings.get(SessionConf.CheckpointFormatKey).flatMap(_.trim.toIntOption)
      .getOrElse(SessionConf.defaultCheckpointFormat)
    settings.get(SessionConf.ProviderClassKey).map(_.trim) match {
      case Some(SluiceConf.CachingProviderClass) => CachingStateStoreProvider.checkpointFormatRefusal(
          conf.commitIntervalMs, conf.get(SluiceConf.StateStoreCacheDelegate), format)
      case Some(c) if c == classOf[InMemoryWindowStoreProvider].getName =>
        InMemoryWindowStoreProvider.checkpointFormatRefusal(format)
      case _ => None
    }
  }

  /** Task slots of an executor as the driver sees them: local[N] counts N, local-cluster[n,c,m] counts c. */
  private[plugin] def executorCores(master: String, confCores: Option[Int]): Option[Int] = {
    val local = """local\[(\d+|\*)(?:,\s*\d+)?\]""".r
    val localCluster = """local-cluster\[\s*\d+\s*,\s*(\d+)\s*,\s*\d+\s*\]""".r
    master match {
      case "local" => Some(1)
      case local("*") => Some(Runtime.getRuntime.availableProcessors())
      case local(n) => Some(n.toInt)
      case localCluster(c) => Some(c.toInt)
      case _ => confCores
    }
  }
}

class SluiceDriverPlugin extends DriverPlugin {
  private val log = LoggerFactory.getLogger(classOf[SluicePlugin])

  override def init(sc: SparkContext, ctx: PluginContext): JMap[String, String] = {
    // First: every other check below already runs code compiled against one Spark minor.
    SparkVersions.refusal(sc.version).foreach(m => throw new SluiceConfException(m))
    val settings = sc.getConf.getAll
    val conf = SluiceConf.validated(settings)
    SluicePlugin.stateStoreRefusal(settings.toMap, conf).foreach(m => throw new SluiceConfException(m))
    if (conf.get(SluiceConf.CheckpointLocalDirect)) {
      LocalCheckpointFileManager.refusal(settings.toMap).foreach(m => throw new SluiceConfException(m))
      // Spark reads the manager class from the Hadoop conf every session derives from this one.
      sc.hadoopConfiguration.set(SessionConf.CheckpointFileManagerKey, classOf[LocalCheckpointFileManager].getName)
    }
    SluiceConf.deprecationWarnings(conf.settings).foreach(w => log.warn(w))
    SluiceConf.experimentalWarning(conf.settings).foreach(w => log.warn(w))
    val cores = SluicePlugin.executorCores(sc.master, sc.getConf.getOption("spark.executor.cores").map(_.toInt))
    cores.map(c => Map(SluicePlugin.ExecutorCoresKey -> c.toString)).getOrElse(Map.empty[String, String]).asJava
  }
}

class SluiceExecutorPlugin extends ExecutorPlugin {
  // What the gauges show: the budget of the task started last on this executor, which carries its
  // query's session settings (before the first task, the executor's SparkConf's).
  @volatile private var lastTask: SlotBudget = _

  override def init(ctx: PluginContext, extraConf: JMap[String, String]): Unit = {
    val cores = ctx.conf.getOption("spark.executor.cores").map(_.toInt)
      .orElse(Option(extraConf.get(SluicePlugin.ExecutorCoresKey)).map(_.toInt))
      .getOrElse(Runtime.getRuntime.availableProcessors())
    MemoryBudget.install(ctx.executorID, SlotBudget.slots(cores, ctx.conf.getInt("spark.task.cpus", 1)))
    lastTask = MemoryBudget.current

    val registry = ctx.metricRegistry()
    def gauge(name: String, value: => Long): Unit =
      registry.register(name, new Gauge[Long] { override def getValue: Long = value })
    gauge("taskSlots", lastTask.taskSlots.toLong)
    gauge("cacheMaxBytes", lastTask.cacheMaxBytes)
    gauge("cacheBytesPerSlot", lastTask.cacheBytesPerSlot)
    gauge("inputBufferMaxBytes", lastTask.inputBufferMaxBytes)
    gauge("cacheBytes", SlotCaches.executorBytes)
    gauge("cachePeakBytes", SlotCaches.peakBytes)
  }

  // A value of the wrong form keeps the gauges as they were: it fails where a feature reads it,
  // with the key and the value, not in every task this executor starts.
  override def onTaskStart(): Unit =
    try lastTask = MemoryBudget.current
    catch { case _: SluiceConfException => }

  override def shutdown(): Unit = MemoryBudget.uninstall()
}
