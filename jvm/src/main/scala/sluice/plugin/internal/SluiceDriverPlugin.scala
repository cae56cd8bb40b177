package sluice.plugin.internal

import java.util.{Map => JMap}

import scala.jdk.CollectionConverters._

import org.apache.spark.SparkContext
import org.apache.spark.api.plugin.{DriverPlugin, PluginContext}
import org.slf4j.LoggerFactory

import sluice.conf.{SluiceConf, SluiceConfException}
import sluice.plugin.SluicePlugin
import sluice.spark.SparkVersions

/** [[SluicePlugin]]'s driver part. */
private[sluice] class SluiceDriverPlugin extends DriverPlugin {
  private val log = LoggerFactory.getLogger(classOf[SluicePlugin])

  override def init(sc: SparkContext, ctx: PluginContext): JMap[String, String] = {
    // First: every other check below already runs code compiled against one Spark minor.
    SparkVersions.refusal(sc.version).foreach(m => throw new SluiceConfException(m))
    val settings = sc.getConf.getAll
    val conf = SluiceConf.validated(settings)
    SluicePlugin.stateStoreRefusal(settings.toMap, conf).foreach(m => throw new SluiceConfException(m))
    SluiceConf.deprecationWarnings(conf.settings).foreach(w => log.warn(w))
    SluiceConf.experimentalWarning(conf.settings).foreach(w => log.warn(w))
    val cores = SluicePlugin.executorCores(sc.master, sc.getConf.getOption("spark.executor.cores").map(_.toInt))
    cores.map(c => Map(SluicePlugin.ExecutorCoresKey -> c.toString)).getOrElse(Map.empty[String, String]).asJava
  }
}
