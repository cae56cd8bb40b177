package sluice.suppress.internal

import org.apache.spark.sql.catalyst.expressions.{Attribute, AttributeReference, ExprId, Expression}
import org.apache.spark.sql.catalyst.expressions.aggregate.DeclarativeAggregate

/**
 * Declarative aggregate functions' buffers in rows that hold them one after another (Spark's
 * partial aggregates and state rows), and their merge expressions rewritten over other inputs: what
 * a sluice operator needs to compute a merge as one projection instead of a hash aggregation.
 */
private[sluice] object AggregateBuffers {

  /** Each function's slice of `columns`, which hold the functions' input buffers in order. */
  def slices(functions: Seq[DeclarativeAggregate], columns: Seq[Attribute]): Seq[Seq[Attribute]] =
    functions.scanLeft(0)(_ + _.inputAggBufferAttributes.length).zip(functions).map { case (from, f) =>
      columns.slice(from, from + f.inputAggBufferAttributes.length)
    }

  /** `e` with each attribute `by` names replaced by its expression (at once, not repeatedly). */
  def substitute(e: Expression, by: Map[ExprId, Expression]): Expression = e.transformUp {
    case a: AttributeReference if by.contains(a.exprId) => by(a.exprId)
  }
}
