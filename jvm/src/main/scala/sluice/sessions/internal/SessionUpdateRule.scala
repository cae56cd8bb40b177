package sluice.sessions.internal

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.{
  Alias, Attribute, AttributeReference, ExprId, Expression, If, Literal,
  NamedExpression, SessionWindow
}
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression
import org.apache.spark.sql.catalyst.plans.logical.{Aggregate, AnalysisHelper, LeafNode, LogicalPlan}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.catalyst.streaming.WriteToStreamStatement
import org.apache.spark.sql.streaming.OutputMode

import sluice.conf.SluiceConf
import sluice.spark.SparkNodes
import sluice.suppress.{LateRecords, UntilWindowCloses}
import sluice.suppress.internal.{LateRecordsExec, SuppressNode}

/**
 * Session-window aggregations in update mode (KIP-328's last scenario): Spark plans them only in
 * append and complete mode, and refuses update mode when the query starts. This rule sees the
 * query with its output mode (the statement `writeStream.start()` analyses, which holds both), and
 * in update mode only rewrites each streaming session-window `Aggregate` into
 *
 * {{{
 *   Project(the aggregation's columns; each aggregate column null on a retraction)
 *     SessionUpdateNode(the same grouping keys + retracted, the same aggregates + retracted)
 *       Project(the input + `retracted` = false)
 * }}}
 *
 * so a merged-away session leaves as its old key (grouping columns, the old session window) with
 * null aggregates: the tombstone Kafka Streams forwards for it. The `retracted` column goes on to a
 * `suppress` right above (which needs it to tell a tombstone from a row) and no further: the query's
 * output is the user's.
 *
 * A hint-resolution rule, the analyzer's first batch: Spark checks the output mode in its resolution
 * batch, before any resolution rule of an extension runs. The query inside the statement is a
 * DataFrame's plan, analysed already, which `resolveOperators` would skip; the rewrite changes it
 * once, without analysing it again, and is idempotent (no session-window `Aggregate` is left).
 */
private[sluice] case class SessionUpdateRule(session: SparkSession) extends Rule[LogicalPlan] {
  import SessionUpdateRule._

  override def apply(plan: LogicalPlan): LogicalPlan = plan match {
    case w: WriteToStreamStatement if w.outputMode == OutputMode.Update() && w.inputQuery.exists(isSessionAggregate) =>
      val flags = scala.collection.mutable.Set.empty[ExprId]
      val fuse = SluiceConf(session.conf.getAll).get(SluiceConf.SuppressFused)
      val query = AnalysisHelper.allowInvokingTransformsInAnalyzer {
        // Fused final results (`spark.sluice.suppress.fused`, as for time windows): an unbounded
        // until_window_closes right above the aggregation is what Spark's append-mode session
        // save emits; the suppress node goes, the aggregation is marked.
        val fused = if (!fuse) w.inputQuery
        else w.inputQuery.transformDown {
          case s: SuppressNode if fusable(s) =>
            s.child match { case a: Aggregate => FusedMark(a, LateRecordsExec.of(s.suppressed)) }
        }
        fused.transformUp {
          case FusedMark(a, late) => rewrite(a, finalOnly = true, late)._1
          case a: Aggregate if isSessionAggregate(a) =>
            val (replaced, retracted) = rewrite(a, finalOnly = false, None)
            flags += retracted.exprId
            replaced
          // suppress right above reads the flag: a retraction drops a buffered session under
          // until_window_closes and is forwarded (rate-limited) under the time limits. Its late
          // records are taken out of the sessions' input, where the records are, and its grace
          // closes sessions in their save (a late session is never stored, as in Kafka Streams).
          case s: SuppressNode if s.retracted.isEmpty && s.child.output.exists(o => flags(o.exprId)) =>
            val flag = s.child.output.find(o => flags(o.exprId))
            val late = LateRecordsExec.of(s.suppressed)
            val early = s.suppressed match { case _: UntilWindowCloses => s.earlyMs; case _ => 0L }
            val child = if (late.isEmpty && early == 0) s.child
            else s.child.transformDown {
              case u: SessionUpdateNode if flag.exists(_.exprId == u.retracted.exprId) =>
                u.copy(late = late, earlyMs = early)
            }
            s.copy(retracted = flag, child = child)
        }
      }
      // The flag goes no further than the query's own columns (a projection above drops it already).
      val original = w.inputQuery.output
      val kept =
        if (query.output.map(_.exprId) == original.map(_.exprId)) query else SparkNodes.project(original, query)
      w.withNewChildren(Seq(kept))
    case _ => plan
  }

  private def fusable(s: SuppressNode): Boolean = s.child match {
    case a: Aggregate if isSessionAggregate(a) =>
      s.suppressed match {
        // A grace below the watermark delay closes sessions before Spark's append-mode save would emit
        // them: that suppress runs unfused, as for time windows (FusedFinal).
        case u: UntilWindowCloses =>
          u.buffer.maxRecords == Long.MaxValue && u.buffer.maxBytes == Long.MaxValue && s.earlyMs == 0
        case _ => false
      }
    case _ => false
  }

  private def isSessionAggregate(p: LogicalPlan): Boolean = p match {
    case a: Aggregate => a.child.isStreaming && a.groupingExpressions.exists(isSessionWindow)
    case _ => false
  }

  private def isSessionWindow(e: Expression): Boolean = e match {
    case a: AttributeReference =>
      a.metadata.contains(SessionWindow.marker) && a.metadata.getBoolean(SessionWindow.marker)
    case _ => false
  }

  /** Whether output column `e` is computed from the grouping keys alone (kept on a retraction). */
  private def fromKeysOnly(e: NamedExpression): Boolean = !e.exists(_.isInstanceOf[AggregateExpression])

  /** The replacement of `a`, its output with `retracted` last, and `retracted`. */
  private def rewrite(a: Aggregate, finalOnly: Boolean, late: Option[LateRecords]): (LogicalPlan, Attribute) = {
    val flag = Alias(Literal(false), RetractedColumn)()
    val retracted = flag.toAttribute
    val input = SparkNodes.project(a.child.output :+ flag, a.child)
    // Aggregate columns get new ids inside; the Project above gives them back their own.
    val inner = a.aggregateExpressions.map {
      case e if fromKeysOnly(e) => e
      case al: Alias => Alias(al.child, al.name)(qualifier = al.qualifier, explicitMetadata = al.explicitMetadata)
      case e => Alias(e, e.name)()
    }
    val node =
      SessionUpdateNode(a.groupingExpressions :+ retracted, inner :+ retracted, retracted, input, finalOnly, late)
    val columns = a.aggregateExpressions.zip(inner).map {
      case (outer, in) if outer eq in => outer.toAttribute
      case (outer, in) =>
        Alias(If(retracted, Literal(null, in.dataType), in.toAttribute), outer.name)(
          exprId = outer.exprId, qualifier = outer.qualifier)
    }
    (SparkNodes.project(columns :+ retracted, node), retracted)
  }
}

private[sluice] object SessionUpdateRule {

  /** The input column that tells a retraction from an update inside the plan (never in the output). */
  val RetractedColumn = "__sluice_retracted"

  /**
   * A session aggregation suppress(until_window_closes(unbounded())) is fused into, for one rewrite:
   * held as a field, not a child, so that the rewrite of unfused aggregations passes it by.
   */
  private final case class FusedMark(aggregate: Aggregate, late: Option[LateRecords]) extends LeafNode {
    override def output: Seq[Attribute] = aggregate.output
  }
}
