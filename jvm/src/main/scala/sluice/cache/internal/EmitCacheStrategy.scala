package sluice.cache.internal

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.sluice.StatefulOperatorSupport
import org.json4s.JsonDSL._

import sluice.spark.PlanTypes.{SparkPlan, SparkStrategy}
import sluice.spark.RealTimePlans
import sluice.state.{FileFormats, Sidecars}

/** Plans [[EmitCacheNode]]s and [[EmitCacheSkipped]] markers. */
private[sluice] case class EmitCacheStrategy(session: SparkSession) extends SparkStrategy {
  override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
    case n: EmitCacheNode =>
      // The interval, for sluice.inspect to tell when each held row is due.
      Sidecars.record(session, n, FileFormats.EmitCacheRows,
        ("kind" -> "emitCache") ~ ("intervalMs" -> n.intervalMs) ~ ("keys" -> n.keys.map(_.name).toList))
      val ctx = StatefulOperatorSupport.streamContext(session, n)
      EmitCacheExec(n.keys, n.intervalMs, ctx, planLater(n.child),
        realTime = ctx.exists(c => RealTimePlans.isRealTime(c.execution))) :: Nil
    case EmitCacheSkipped(reason, child) => EmitCacheSkippedExec(reason, planLater(child)) :: Nil
    case _ => Nil
  }
}
