package sluice.state

import org.apache.spark.sql.catalyst.expressions.{Alias, Attribute, Expression, NamedExpression}
import org.apache.spark.sql.catalyst.plans.logical.Aggregate

/**
 * The columns of an aggregation's output that are its grouping expressions: the keys of a sluice
 * operator above it (suppress, the emission cache). Each operator keeps the order it has always
 * used, since its stored keys are laid out in that order.
 */
private[sluice] object GroupingColumns {

  /**
   * For each grouping expression of `agg`, in grouping order, the first output column that is it;
   * none for one the output drops.
   */
  def inGroupingOrder(agg: Aggregate): Seq[Attribute] =
    agg.groupingExpressions.flatMap(g => agg.aggregateExpressions.iterator.flatMap(column(_, g)).nextOption())

  /**
   * The output columns of `agg` that are one of its grouping expressions, in output order, when they
   * are as many as the grouping expressions; else none (rows of two groups could not be told apart).
   */
  def allInOutputOrder(agg: Aggregate): Seq[Attribute] = {
    val keys =
      agg.aggregateExpressions.flatMap(out => agg.groupingExpressions.iterator.flatMap(column(out, _)).nextOption())
    if (keys.size == agg.groupingExpressions.size) keys else Nil
  }

  /** `out` as an attribute of the output, when it is grouping expression `g`. */
  private def column(out: NamedExpression, g: Expression): Option[Attribute] = out match {
    case a: Attribute => g match {
        case ga: Attribute if ga.exprId == a.exprId => Some(a)
        case _ => None
      }
    case al @ Alias(child, _) if child.semanticEquals(g) => Some(al.toAttribute)
    case _ => None
  }
}
