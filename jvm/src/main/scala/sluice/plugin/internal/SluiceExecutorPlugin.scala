package sluice.plugin.internal

import java.util.{Map => JMap}

import com.codahale.metrics.Gauge
import org.apache.spark.api.plugin.{ExecutorPlugin, PluginContext}

import sluice.cache.internal.SlotCaches
import sluice.conf.{MemoryBudget, SlotBudget, SluiceConfException}
import sluice.plugin.SluicePlugin

/** [[SluicePlugin]]'s executor part. */
private[sluice] class SluiceExecutorPlugin extends ExecutorPlugin {
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
