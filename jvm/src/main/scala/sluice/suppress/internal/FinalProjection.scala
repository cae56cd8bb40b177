package sluice.suppress.internal

import org.apache.spark.sql.catalyst.expressions.{Alias, Attribute, ExprId, Expression, NamedExpression}
import org.apache.spark.sql.catalyst.expressions.aggregate.{DeclarativeAggregate, Final}

import sluice.spark.PlanTypes.{BaseAggregateExec, SparkPlan, StateStoreSaveExec}
import sluice.spark.SparkNodes
import sluice.suppress.internal.AggregateBuffers.substitute

/**
 * The final aggregation above a fused aggregation's append-mode state save, as a projection.
 *
 * Spark plans a streaming aggregation as partial aggregates, the state save, then a final
 * aggregation over what the save emits, which hashes (or sorts) every emitted row by its key before
 * computing the results. An append-mode save emits each key once, in the batch that evicts it (the
 * store holds one row per key and drops it as it emits it), so every group the final aggregation
 * builds has one row: its result is each function's merge of that row into the initial buffer,
 * then the function's evaluation. This projection computes exactly that per row, without the hash
 * map: when a window closes on millions of keys, their final results stream to the sink instead of
 * being gathered in memory first.
 *
 * Only for declarative aggregate functions (count, sum, avg, min, max, first, ...), whose merge and
 * evaluation are expressions; a plan with any other function (collect_list, percentile, ...) keeps
 * Spark's final aggregation.
 */
private[internal] object FinalProjection {

  /** `plan` with the final aggregation over its append-mode state save replaced, where it can be. */
  def apply(plan: SparkPlan): SparkPlan = plan.transformUp {
    case a: BaseAggregateExec if a.child.isInstanceOf[StateStoreSaveExec] => of(a).getOrElse(a)
  }

  private def of(agg: BaseAggregateExec): Option[SparkPlan] = {
    val functions = agg.aggregateExpressions.map(_.aggregateFunction)
    if (agg.aggregateExpressions.exists(e => e.mode != Final || e.isDistinct || e.filter.isDefined) ||
      !functions.forall(_.isInstanceOf[DeclarativeAggregate])) return None
    val declarative = functions.map(_.asInstanceOf[DeclarativeAggregate])
    // The save's rows: the grouping columns, then each function's buffer in order (Spark's final
    // aggregation reads them by position from initialInputBufferOffset).
    val buffers = agg.child.output.drop(agg.initialInputBufferOffset)
    if (buffers.length != declarative.map(_.inputAggBufferAttributes.length).sum) return None
    val slices = AggregateBuffers.slices(declarative, buffers)

    val results: Map[ExprId, Expression] = agg.aggregateAttributes.zip(declarative.zip(slices)).map {
      case (result, (f, row)) =>
        // merge(initial buffer, the row's buffer), then evaluate: what the final aggregation computes
        // for a group of one row, with no assumption about the merge's identity (-0.0 + 0 is 0.0)
        val initial = f.aggBufferAttributes.map(_.exprId).zip(f.initialValues).toMap
        val input = f.inputAggBufferAttributes.map(_.exprId).zip(row).toMap
        val merged = f.mergeExpressions.map(substitute(_, initial ++ input))
        val buffer = f.aggBufferAttributes.map(_.exprId).zip(merged).toMap
        result.exprId -> substitute(f.evaluateExpression, buffer)
    }.toMap

    val projectList = agg.resultExpressions.map {
      case a: Attribute if results.contains(a.exprId) => Alias(results(a.exprId), a.name)(a.exprId, a.qualifier)
      case e => substitute(e, results).asInstanceOf[NamedExpression]
    }
    Some(SparkNodes.projectExec(projectList, agg.child))
  }

}
