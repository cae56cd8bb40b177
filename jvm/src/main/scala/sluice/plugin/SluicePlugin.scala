package sluice.plugin

import org.apache.spark.api.plugin.{DriverPlugin, ExecutorPlugin, SparkPlugin}

import sluice.cache.CachingStateStoreProvider
import sluice.conf.SluiceConf
import sluice.plugin.internal.{SluiceDriverPlugin, SluiceExecutorPlugin}
import sluice.spark.SparkSessionConf
import sluice.windowstore.InMemoryWindowStoreProvider

/**
 * The Spark plugin (`spark.plugins=sluice.plugin.SluicePlugin`).
 *
 * Driver part: when the SparkContext starts, refuses a Spark minor other than the one this jar is
 * built for, validates every `spark.sluice.*` key (a key sluice removed fails with when and why), and
 * the session's state store conf where a sluice provider would refuse it, so a bad value fails startup
 * instead of a query minutes later; logs one warning naming the experimental rewrites that are on.
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
    val format = settings.get(SparkSessionConf.CheckpointFormatKey).flatMap(_.trim.toIntOption)
      .getOrElse(SparkSessionConf.defaultCheckpointFormat)
    settings.get(SparkSessionConf.ProviderClassKey).map(_.trim) match {
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
