package sluice.suppress.internal

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.sluice.{StatefulOperatorSupport, StreamContext}
import org.json4s._
import org.json4s.JsonDSL._

import sluice.spark.PlanTypes.{SparkPlan, SparkStrategy}
import sluice.conf.RealTimeMode
import sluice.spark.{RealTimePlans, SparkNodes}
import sluice.state.{FileFormats, Sidecars}
import sluice.suppress._

/** Plans [[SuppressNode]]s; installed by sluice.plugin.SluiceExtensions. */
private[sluice] case class SuppressStrategy(session: SparkSession) extends SparkStrategy {
  override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
    case n: SuppressNode =>
      val ctx = StatefulOperatorSupport.streamContext(session, n)
      ctx.foreach(c => SuppressChecks.requireUpdateMode(c.outputMode.toString))
      if (ctx.exists(c => RealTimePlans.isRealTime(c.execution))) realTime(n, ctx.get) :: Nil
      // The sidecar (mode, limit and bound for sluice.inspect) only beside a suppress operator's own
      // state: on the fused path there is none, and its directory would read as unfused state.
      else FusedFinal.plan(session, n, ctx).getOrElse {
        requireSameAggregationState(n, Nil)
        Sidecars.record(session, n, FileFormats.SuppressRows, SuppressStrategy.sidecar(n, Nil))
        SuppressExec(n.suppressed, n.keys, n.window, n.graceMs, n.time, ctx, planLater(withLateRecords(n, ctx)),
          retracted = n.retracted, earlyMs = n.earlyMs)
      } :: Nil
    case l: LateRecordsNode =>
      LateRecordsExec(l.late, l.window, l.earlyMs, l.context, planLater(l.child), l.hidden, l.sessionKeys) :: Nil
    case _ => Nil
  }

  /**
   * `n`'s input, with its late records taken out and kept where `n` keeps them. Over session windows
   * (`n` reads their retraction flag) the session update below takes them out of its own input: its
   * rule hands it `n`'s late records.
   */
  private def withLateRecords(n: SuppressNode, ctx: Option[StreamContext]): LogicalPlan =
    (LateRecordsExec.of(n.suppressed), ctx) match {
      case (Some(_), _) if n.retracted.isDefined => n.child
      case (Some(late), Some(c)) => LateRecordsExec.place(n.child, late, n.window.get, n.earlyMs, c)
      case _ => n.child
    }

  /**
   * Refuses a run whose aggregation below an until_window_closes suppress would carry other hidden
   * columns (`hidden`, see [[RealTimeSuppress.hiddenColumns]]) than the run that wrote the checkpoint,
   * as its sidecar says: the aggregation's state schema differs, which Spark would refuse in its own
   * words. A sidecar without the field (written before sluice recorded it) leaves it to Spark.
   */
  private def requireSameAggregationState(n: SuppressNode, hidden: Seq[String]): Unit =
    if (n.suppressed.isInstanceOf[UntilWindowCloses]) {
      Sidecars.earlier(session, n).map(_ \ SuppressStrategy.AggregationColumnsField).foreach {
        case JArray(values) =>
          val found = values.collect { case JString(c) => c }
          if (found != hidden) {
            val name = n.suppressed.name.getOrElse("suppress(until_window_closes)")
            throw new SuppressUsageException(RealTimeMode.stateSwitchRefusal(name, found, hidden))
          }
        case _ =>
      }
    }

  /**
   * Under the real-time trigger: never fused (Spark plans its streamline aggregation there, and an
   * append-mode save would emit only when the batch ends), decided per row on the partition's
   * stream time (see [[RealTimeSuppress]]).
   */
  private def realTime(n: SuppressNode, ctx: StreamContext): SparkPlan = {
    RealTimeSuppress.refuseUnsupported(n)
    FusedFinal.refuseFusedCheckpoint(session, ctx)
    val hidden = RealTimeSuppress.hiddenColumns(n)
    requireSameAggregationState(n, hidden)
    Sidecars.record(session, n, FileFormats.SuppressRows, SuppressStrategy.sidecar(n, hidden))
    n.suppressed match {
      case _: UntilWindowCloses =>
        val (child, ts, record) = RealTimeSuppress.withStreamTime(n)
        // The hidden columns are dropped right above suppress: the query's output is as written.
        SparkNodes.projectExec(n.output,
          SuppressExec(n.suppressed, n.keys, n.window, n.graceMs, n.time, Some(ctx),
            planLater(child), streamTime = Some(ts), realTime = true, earlyMs = n.earlyMs, lateRecord = record))
      case _ =>
        SuppressExec(n.suppressed, n.keys, n.window, n.graceMs, n.time, Some(ctx), planLater(n.child), realTime = true,
          earlyMs = n.earlyMs)
    }
  }
}

private[sluice] object SuppressStrategy {

  /** The sidecar's list of the hidden columns the aggregation below until_window_closes carries. */
  val AggregationColumnsField = "aggregationColumns"

  /**
   * What sluice.inspect needs to tell when each buffered row is due (see [[Sidecars]]), and for
   * until_window_closes the hidden columns of the aggregation below (`hidden`), which a restart
   * must keep.
   */
  def sidecar(s: SuppressNode, hidden: Seq[String]): JObject = {
    val (mode, limit) = s.suppressed match {
      case _: UntilWindowCloses => ("until_window_closes", None)
      case t: UntilTimeLimit => ("until_time_limit", Some(t.limitMs))
      case w: UntilWallClockTimeLimit => ("until_wall_clock_time_limit", Some(w.limitMs))
    }
    val b = s.suppressed.buffer
    def bound(v: Long): Option[Long] = if (v == Long.MaxValue) None else Some(v)
    ("kind" -> "suppress") ~ ("name" -> s.suppressed.name) ~ ("mode" -> mode) ~ ("limitMs" -> limit) ~
      ("graceMs" -> (if (s.window.isDefined) Some(s.graceMs) else None)) ~
      // delay - grace: the windows of a batch at watermark w close at w + earlyMs (SuppressExec.closeTime)
      ("earlyMs" -> (if (s.earlyMs > 0) Some(s.earlyMs) else None)) ~
      ("keys" -> s.keys.map(_.name).toList) ~
      (AggregationColumnsField -> (if (mode == "until_window_closes") Some(hidden.toList) else None)) ~
      ("buffer" -> (("maxRecords" -> bound(b.maxRecords)) ~ ("maxBytes" -> bound(b.maxBytes)) ~
        ("whenFull" -> whenFull(b.whenFull))))
  }

  /** A buffer's when-full strategy as the sidecar names it. */
  def whenFull(s: BufferFullStrategy): String = s.name.replace('-', '_')
}
