package sluice.sessions.internal

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.{Attribute, NamedExpression, RuntimeReplaceable, SessionWindow}
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression
import org.apache.spark.sql.catalyst.planning.PhysicalAggregation
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.sluice.{StatefulOperatorSupport, StreamContext}
import org.apache.spark.sql.streaming.OutputMode

import sluice.spark.PlanTypes.{
  AggUtils, SessionWindowStateStoreRestoreExec, SessionWindowStateStoreSaveExec, SparkPlan, SparkStrategy
}
import sluice.conf.RealTimeMode
import sluice.spark.{RealTimePlans, SparkSessionConf, SparkSessions, SparkNodes}
import sluice.suppress.internal.{LateRecordsCounted, LateRecordsExec, SuppressNode}

/**
 * Plans a [[SessionUpdateNode]] as Spark plans a session-window aggregation (partial aggregation,
 * shuffle, sort, restore of the key's stored sessions, merge), with [[SessionUpdateExec]] where
 * Spark's save would be. Spark numbers and fills in its own save and restore pair by their classes
 * only; here the restore reads this operator's store, so it gets this operator's state info (and
 * then Spark's watermark rule gives it the watermarks, as to its own restore).
 */
private[sluice] case class SessionUpdateStrategy(session: SparkSession) extends SparkStrategy {
  override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
    case n: SessionUpdateNode if realTime => SessionUpdateStrategy.refuseRealTime()
    // suppress over session windows: refused as the sessions below it, not as a suppress whose input
    // is no windowed aggregation (this strategy is installed before suppress's to see it first)
    case s: SuppressNode if s.child.exists(_.isInstanceOf[SessionUpdateNode]) && realTime =>
      SessionUpdateStrategy.refuseRealTime()
    case n: SessionUpdateNode =>
      // Functions Spark's optimizer would have replaced in an `Aggregate` (count_if, bool_and, ...).
      val aggregates = n.aggregates.over(n.inputs).map(_.transformUp {
        case r: RuntimeReplaceable => r.replacement
      }.asInstanceOf[NamedExpression])
      val ctx = StatefulOperatorSupport.streamContext(session, n)
      SparkNodes.aggregate(n.groupingExpressions, aggregates, withLateRecords(n, ctx)) match {
        case PhysicalAggregation(grouping, aggregates, results, child) =>
          planned(n, ctx, grouping, aggregates, results, child)
        case _ => Nil
      }
    case _ => Nil
  }

  /** Whether the batch being planned runs under Spark's real-time trigger (Spark 4.3). */
  private def realTime: Boolean =
    StatefulOperatorSupport.currentStream(session).flatMap(s => Option(s.lastExecution)).exists(
      RealTimePlans.isRealTime)

  /**
   * `n`'s input, with the late records of the suppress above taken out and kept (the retraction
   * flag, not an input column, is left out of them): closed at the watermark as Spark's restore
   * drops them, and with a grace below the delay staged for the save to judge by merged session.
   */
  private def withLateRecords(n: SessionUpdateNode, ctx: Option[StreamContext]): LogicalPlan =
    (n.late, ctx) match {
      case (Some(late), Some(c)) =>
        val window = n.groupingExpressions.collectFirst {
          case a: Attribute if a.metadata.contains(SessionWindow.marker) => a
        }.get
        val keys = n.groupingExpressions.filterNot {
          case a: Attribute => a.exprId == window.exprId
          case _ => false
        }
        LateRecordsExec.above(n.child, late, window, n.earlyMs, c, hidden = Seq(n.retracted), sessionKeys = keys)
      case _ => n.child
    }

  private def planned(
      n: SessionUpdateNode,
      ctx: Option[StreamContext],
      grouping: Seq[NamedExpression],
      aggregates: Seq[org.apache.spark.sql.catalyst.expressions.Expression],
      results: Seq[NamedExpression],
      child: LogicalPlan): Seq[SparkPlan] = {
    ctx.foreach(SessionPlanRecord.check(session, _, n.finalOnly))
    val conf = SparkSessions.classic(session).sessionState.conf
    val keys = grouping.map(StatefulOperatorSupport.normalizedGroupingKey)
    val sessionWindow = keys.find(_.metadata.contains(SessionWindow.marker)).get
    // Each input partition merges its events' sessions before the shuffle: Spark's setting where the
    // user set it, else yes (Spark's default is no). The merge after the shuffle merges the same
    // sessions whether or not they were merged before it (merging is associative, and late rows are
    // dropped after both), so only the cost differs: a local sort of the batch's rows, against
    // shuffling one row per event instead of one per local session. A batch with many events per
    // session (a backlog being caught up, a busy key) gains; Spark leaves it off for batches of few.
    val mergeBeforeShuffle = SparkSessionConf.mergeSessionsInLocalPartition(conf).getOrElse(true)
    val sparkPlan = AggUtils.planStreamingAggregationForSession(
      keys, sessionWindow, aggregates.map(_.asInstanceOf[AggregateExpression]), results,
      SparkSessionConf.sessionWindowStateFormat(conf), mergeBeforeShuffle, planLater(child))
    val counted = n.finalOnly && n.late.isDefined && ctx.isDefined
    sparkPlan.map(_.transformUp {
      case r: SessionWindowStateStoreRestoreExec => ctx.fold(r)(c => SparkNodes.sessionRestoreWith(r, c.stateInfo))
      // Fused final results: Spark's own save in append mode emits each session once, when the
      // watermark passes its end, and never a merged-away one: what suppress would emit, without
      // its buffer. Spark's watermark rule fills in its watermarks (it has its state info).
      case s: SessionWindowStateStoreSaveExec if n.finalOnly =>
        ctx.fold(s)(c => SparkNodes.sessionSaveWith(s, c.stateInfo, OutputMode.Append()))
      case s: SessionWindowStateStoreSaveExec =>
        SessionUpdateExec(s.keyWithoutSessionExpressions, s.sessionExpression, n.retracted, s.stateFormatVersion,
          ctx, s.child, n.earlyMs)
    }).map(p => if (counted) LateRecordsCounted(p) else p) // suppress counts them when it is not fused
  }
}

private[sluice] object SessionUpdateStrategy {

  /**
   * Session windows under the real-time trigger, refused when the batch is planned: Spark has no
   * real-time session planning (its allowlist names the sort, the merge and the restore), and the
   * merge works on the batch's rows sorted by key and session start, a sort that ends only when the
   * batch's input does. Sessions would leave only at the checkpoint interval: micro-batches do better.
   */
  def refuseRealTime(): Nothing = throw new UnsupportedOperationException(RealTimeMode.refusal(
      "A session window aggregation (session_window) in update mode, with or without suppress,",
      "Spark plans no session windows in real-time mode, and merging each key's sessions needs the batch's rows " +
        "sorted by key and session start, so all of the batch's input",
      RealTimeMode.UseMicroBatches))
}
