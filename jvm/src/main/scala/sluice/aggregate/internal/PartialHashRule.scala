package sluice.aggregate.internal

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.SortOrder
import org.apache.spark.sql.catalyst.expressions.aggregate.Partial

import sluice.conf.SluiceConf
import sluice.spark.PlanTypes.{ColumnarRule, SortAggregateExec, SortExec, SparkPlan}
import sluice.spark.SparkNodes

/**
 * Partial aggregation by hash (`spark.sluice.aggregate.partial.hash`): a partial aggregation before
 * a shuffle that Spark plans as a sort and a sort aggregation runs as an object-hash aggregation over
 * the sort's input instead.
 *
 * Spark sorts where an aggregate buffer does not fit its hash aggregation's fixed-width rows (`max`
 * of a struct, as Nexmark q7 takes the highest bid with its fields): every input row of the batch is
 * sorted by the grouping keys, then aggregated outside whole-stage code generation. The object-hash
 * aggregation holds any buffer as an object row and falls back to sorting by itself past Spark's
 * threshold of keys (`spark.sql.objectHashAggregate.sortBased.fallbackThreshold`), so a partial
 * aggregation over few keys per task, a window per ten seconds of event time, no longer sorts.
 *
 * Why the result is the same: a partial aggregation's output is a set of (keys, buffer) rows that
 * the shuffle and the merge after it combine whatever their number and order; both operators
 * compute them with the same functions from the same rows. Only the map side changes, so the state,
 * its schema and a checkpoint are the same with or without it.
 *
 * A [[SwitchedRewrite]] (so not of real-time plans). It takes only a partial aggregation (no
 * distribution required of its input) directly over a sort of the grouping keys that is local to the
 * partition. Experimental (conf.json): each partial sort aggregation that it leaves alone is named,
 * with why ([[PartialHashRule.Why]]), in one INFO line per plan.
 */
private[sluice] object PartialHashRule {

  /** The rewrite's name in the lines saying why it left an aggregation alone. */
  val Name = "partial aggregation by hash"

  /**
   * Why a partial sort aggregation stays as Spark plans it: the texts of the INFO line
   * ([[sluice.rewrites.NotApplied]]) for the aggregations the rule examines, the map-side sort
   * aggregations (no distribution required of their input).
   */
  object Why {
    val NotAllPartial =
      "it is not a plain partial aggregation (no aggregate function, a distinct one, or partial aggregates merged)"
    val NoSort = "no sort is below it: its input comes in an order Spark did not sort for it (a global " +
      "aggregation, or input sorted by the operator below), so there is no sort to save"
    val GlobalSort =
      "the sort below it is a global one (a shuffle of its own), not the one Spark adds for the aggregation"
    val OtherOrder =
      "the sort below it is not by its grouping keys alone, so it is not the one Spark adds for the aggregation"
  }

  def rule(session: SparkSession): ColumnarRule =
    SwitchedRewrite(session, SluiceConf.AggregatePartialHash, Name) {
      case agg: SortAggregateExec if agg.requiredChildDistributionExpressions.isEmpty => byHash(agg)
    }

  /** The object-hash aggregation replacing `agg` and its sort, where `agg` is a partial one over a local sort; else why not. */
  def byHash(agg: SortAggregateExec): Either[String, SparkPlan] = agg.child match {
    case _ if !isMapSide(agg) => Left(Why.NotAllPartial)
    case sort: SortExec if sort.global => Left(Why.GlobalSort)
    case sort: SortExec if !sortsByKeys(sort.sortOrder, agg) => Left(Why.OtherOrder)
    case sort: SortExec =>
      Right(SparkNodes.objectHashAggregate(agg, sort.child))
    case _ => Left(Why.NoSort)
  }

  private def isMapSide(agg: SortAggregateExec): Boolean =
    agg.requiredChildDistributionExpressions.isEmpty && agg.aggregateExpressions.nonEmpty &&
    agg.aggregateExpressions.forall(a => a.mode == Partial && !a.isDistinct)

  // The sort Spark adds for the aggregation: by its grouping keys, nothing else.
  private def sortsByKeys(order: Seq[SortOrder], agg: SortAggregateExec): Boolean =
    order.size == agg.groupingExpressions.size &&
    order.zip(agg.groupingExpressions).forall { case (o, g) => o.child.semanticEquals(g.toAttribute) }
}
