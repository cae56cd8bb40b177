package sluice.aggregate

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.Attribute
import org.apache.spark.sql.catalyst.expressions.aggregate.{DeclarativeAggregate, PartialMerge}

import sluice.conf.SluiceConf
import sluice.spark.PlanTypes.{BaseAggregateExec, ColumnarRule, HashAggregateExec, SparkPlan, StateStoreRestoreExec}
import sluice.spark.SwitchedRewrite

/**
 * State merged per row (`spark.sluice.aggregate.state.merge`): in a streaming aggregation, the merge
 * of each key's restored state into the batch's aggregate runs as [[StateMergeExec]] instead of a
 * second hash aggregation.
 *
 * Spark plans a streaming aggregation's state side as
 * {{{
 *   save <- merge (hash aggregation) <- restore <- merge (hash aggregation) <- exchange <- partial
 * }}}
 * The first merge leaves one row per key; the restore puts the key's stored row before it; the second
 * merge hashes every key of the batch again only to combine those two rows. Here that combination is
 * done as the rows stream by: the batch's keys go through one hash map, not two. The rows saved are
 * the same, so the state, its schema and a checkpoint are the same with or without it; the rows reach
 * the save in another order, which decides nothing (the save puts each key once).
 *
 * A [[SwitchedRewrite]] (so not of real-time plans). It takes a merge, by the restore's keys, of
 * declarative aggregate functions (count, sum, avg, min, max, first, ...) without filters, directly
 * over a restore with keys (a global aggregation's restore emits its stored row alone when the batch
 * is empty) of an aggregation by those keys, whose columns are the keys and then those functions'
 * buffers.
 */
private[sluice] object StateMergeRule {
  def rule(session: SparkSession): ColumnarRule =
    SwitchedRewrite(session, SluiceConf.AggregateStateMerge) { case m: HashAggregateExec => perRow(m).getOrElse(m) }

  /** The per-row merge in place of `merge`, where it is the second merge over a restore. */
  def perRow(merge: HashAggregateExec): Option[SparkPlan] = merge.child match {
    // The restore's input must be an aggregation by its keys: one row per key, which the merge relies on.
    case restore: StateStoreRestoreExec if restore.keyExpressions.nonEmpty && restore.stateInfo.isDefined &&
        byKeys(restore.child, restore.keyExpressions) =>
      val keys = restore.keyExpressions
      val functions = merge.aggregateExpressions.map(_.aggregateFunction)
      val declarative = functions.collect { case d: DeclarativeAggregate => d }
      val shaped = merge.aggregateExpressions.nonEmpty &&
        merge.aggregateExpressions.forall(a => a.mode == PartialMerge && !a.isDistinct && a.filter.isEmpty) &&
        declarative.size == functions.size &&
        merge.groupingExpressions.map(_.toAttribute.exprId) == keys.map(_.exprId) &&
        restore.output.map(_.exprId) == keys.map(_.exprId) ++ declarative.flatMap(_.inputAggBufferAttributes).map(_.exprId) &&
        merge.output.map(_.exprId) == restore.output.map(_.exprId)
      if (shaped) Some(StateMergeExec(keys, declarative, restore)) else None
    case _ => None
  }

  private def byKeys(plan: SparkPlan, keys: Seq[Attribute]): Boolean = plan match {
    case a: BaseAggregateExec => a.groupingExpressions.map(_.toAttribute.exprId) == keys.map(_.exprId)
    case _ => false
  }
}
