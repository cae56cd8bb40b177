package sluice.sessions.internal

import org.apache.spark.sql.catalyst.expressions.{Attribute, AttributeSet, Expression, NamedExpression}
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.sluice.SluiceStatefulNode

import sluice.conf.SluiceConf
import sluice.suppress.LateRecords

/**
 * A session-window aggregation run in update mode by sluice: the user's `Aggregate`, with the same
 * grouping and aggregate expressions, as a node of its own so that Spark's update-mode refusal of
 * session windows (which looks for an `Aggregate`) does not apply to it. Its input carries the
 * retraction flag (false on every input row) as one more grouping key, so that Spark's own session
 * planning keeps it beside each session's aggregates; [[SessionUpdateExec]] sets it on the rows it
 * retracts. Built by [[SessionUpdateRule]] only. `finalOnly`: `suppress(until_window_closes(unbounded()))`
 * fused into it, which Spark's append-mode save of the same state gives (see [[SessionUpdateStrategy]]).
 * `late`: the late records of the `until_window_closes` right above (fused or not) that keeps them,
 * taken out of this node's input (see [[sluice.suppress.internal.LateRecordsExec]]). `earlyMs`: the
 * watermark delay minus the grace of the `until_window_closes` right above (0 without a grace of its
 * own), by which [[SessionUpdateExec]] judges sessions closed before Spark's watermark does.
 *
 * Spark allows aggregate functions only in its own `Aggregate` and strips the aliases of nodes it
 * does not know, so the output expressions are held out of the analyzer's and optimizer's sight
 * ([[SessionAggregates]]: they were analysed in the user's `Aggregate`), the columns they read are
 * `inputs` (what the optimizer must keep below), and the columns they produce are `output`.
 */
private[sluice] case class SessionUpdateNode(
    groupingExpressions: Seq[Expression],
    aggregates: SessionAggregates,
    inputs: Seq[Attribute],
    override val output: Seq[Attribute],
    retracted: Attribute,
    child: LogicalPlan,
    finalOnly: Boolean = false,
    late: Option[LateRecords] = None,
    earlyMs: Long = 0L)
  extends SluiceStatefulNode {
  override def producedAttributes: AttributeSet = AttributeSet(output)

  /**
   * The output columns that are grouping keys, the session window included and the retraction flag
   * not: what tells two sessions apart (empty when the aggregation drops a key from its output).
   */
  def keyColumns: Seq[Attribute] = {
    val keys = groupingExpressions.collect { case a: Attribute if a.exprId != retracted.exprId => a.exprId }
    val found = output.filter(o => keys.contains(o.exprId))
    if (found.size == keys.size) found else Nil
  }
  override def operatorIdBase: Long = SluiceConf.SessionUpdateIds.from
  override protected def withNewChildInternal(newChild: LogicalPlan): SessionUpdateNode = copy(child = newChild)
}

/**
 * The output expressions of a [[SessionUpdateNode]], as its `Aggregate` held them (not expressions of
 * the node), written over the input columns `over`. Spark gives a node's input columns new ids (each
 * micro-batch's source relation has its own); the node's `inputs` follow, position by position, and
 * [[over]] reads the expressions over them.
 */
private[sluice] final case class SessionAggregates(expressions: Seq[NamedExpression], over: Seq[Attribute]) {
  def over(inputs: Seq[Attribute]): Seq[NamedExpression] = {
    val now = over.map(_.exprId).zip(inputs).toMap
    expressions.map(_.transformUp { case a: Attribute if now.contains(a.exprId) => now(a.exprId) }
        .asInstanceOf[NamedExpression])
  }
  override def toString: String = expressions.mkString("[", ", ", "]")
}

private[sluice] object SessionUpdateNode {
  def apply(grouping: Seq[Expression], aggregates: Seq[NamedExpression], retracted: Attribute,
      child: LogicalPlan, finalOnly: Boolean, late: Option[LateRecords]): SessionUpdateNode = {
    val inputs = AttributeSet(aggregates.flatMap(_.references)).toSeq
    SessionUpdateNode(grouping, SessionAggregates(aggregates, inputs), inputs, aggregates.map(_.toAttribute), retracted,
      child, finalOnly, late)
  }
}
