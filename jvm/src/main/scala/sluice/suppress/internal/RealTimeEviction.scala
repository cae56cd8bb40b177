package sluice.suppress.internal

import java.util.concurrent.ConcurrentHashMap

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.sluice.{MinMetric, RealTimeProgress, StreamContext}

import sluice.spark.PlanTypes.{ColumnarRule, SparkPlan}
import sluice.spark.RealTimePlans
import sluice.suppress.UntilWindowCloses

/**
 * Lateness and eviction of the aggregation below suppress(until_window_closes) under the real-time
 * trigger (Spark 4.3), by suppress's clock instead of Spark's watermark.
 *
 * Spark's real-time aggregation drops a row as late, and evicts a window's state, by the batch's
 * watermark: the largest event time any upstream task has seen minus the delay. While a backlog
 * drains at different speeds, that is the fastest task's time: the aggregation would drop the rows
 * a slower task still has for windows no suppress partition has closed, and evict windows the slower
 * task still updates (which would come back with partial values). So, in each real-time batch's plan:
 *  - the aggregation judges no row late: every row reaches suppress, which drops the updates of
 *    windows its partition has closed (by its own clock, [[StreamTimeCloser]]) as late, whatever the
 *    aggregation holds for them;
 *  - the aggregation evicts, at the end of batch N, only windows ending at or before the least
 *    closing time over suppress's partitions after batch N-1 (and Spark's watermark). Closing times
 *    never move back, so each such window was closed in every partition for all of batch N, and is
 *    from then on: an update of it after the eviction is dropped as late like any other.
 * When that least closing time is not known on this driver (the first batch of a run here, or a batch
 * whose tasks did not all finish), the aggregation evicts nothing in that batch: state is kept a
 * batch longer, never lost.
 */
private[sluice] object RealTimeEviction {

  // (the operator's state directory, its id) -> (the batch, the closing times its tasks added). One
  // entry per stateful checkpoint the driver ran suppress on in real time; a restart replaces it.
  private val latest = new ConcurrentHashMap[(String, Long), (Long, MinMetric)]()

  private def key(ctx: StreamContext) = (ctx.stateInfo.checkpointLocation, ctx.stateInfo.operatorId)

  /** Starts a batch's closing times (driver, when the batch's suppress executes): `acc`, emptied. */
  def startBatch(ctx: StreamContext, acc: MinMetric): MinMetric = {
    acc.reset()
    latest.put(key(ctx), (ctx.batchId, acc))
    acc
  }

  /** How far the aggregation below may evict in the batch of `ctx` (see the object's comment). */
  def evictionMs(ctx: StreamContext): Option[Long] = Option(latest.get(key(ctx))).collect {
    case (batch, acc) if batch == ctx.batchId - 1 => acc
  }.flatMap(_.over(ctx.stateInfo.numPartitions))

  /** The physical rule that sets it, on every batch's plan once its state info is in place. */
  def rule(session: SparkSession): ColumnarRule = new ColumnarRule {
    override def postColumnarTransitions: Rule[SparkPlan] = new Rule[SparkPlan] {
      override def apply(plan: SparkPlan): SparkPlan =
        if (!RealTimePlans.supported) plan
        else plan.transformUp {
          case s: SuppressExec if s.realTime && s.suppressed.isInstanceOf[UntilWindowCloses] && s.context.isDefined =>
            // and each upstream task's event-time progress carried to every partition (ProgressRows)
            val byStreamTime = RealTimePlans.aggregationByStreamTime(s.child, evictionMs(s.context.get))
            s.withNewChildren(Seq(RealTimeProgress.install(byStreamTime, s.window, s.streamTime, s.graceMs)))
        }
    }
  }
}
