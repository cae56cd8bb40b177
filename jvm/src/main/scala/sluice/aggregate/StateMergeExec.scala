package sluice.aggregate

import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Attribute, ExprId, Expression, JoinedRow, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.catalyst.expressions.aggregate.DeclarativeAggregate
import org.apache.spark.sql.catalyst.plans.physical.Partitioning

import sluice.spark.AggregateBuffers
import sluice.spark.AggregateBuffers.substitute
import sluice.spark.PlanTypes.{SparkPlan, UnaryExecNode}

/**
 * The merge of each key's restored state into the batch's aggregate, row by row, where Spark runs a
 * second hash aggregation (see [[StateMergeRule]]).
 *
 * Its input is Spark's state restore, which, for each row of the batch's aggregate (one per key in
 * the partition: that aggregate's output), emits the key's stored row first if there is one, then
 * the row. So a key's rows are adjacent, at most two, the stored one first; each is merged here into
 * a fresh buffer in that order, which is what the hash aggregation computes for them:
 * `merge(merge(initial, stored), batch)`, or `merge(initial, batch)` for a key with no state. Output
 * rows have the input's columns (the keys, then each function's buffer) in the input's key order.
 *
 * Invariant: at most one row is held (copied, as the rows below are reused buffers), the row whose
 * successor decides whether it is a stored row; nothing else is kept, so memory does not grow with
 * the number of keys.
 */
private[aggregate] case class StateMergeExec(
    grouping: Seq[Attribute],
    functions: Seq[DeclarativeAggregate],
    child: SparkPlan) extends UnaryExecNode {

  override def output: Seq[Attribute] = child.output
  override def outputPartitioning: Partitioning = child.outputPartitioning

  override protected def doExecute(): RDD[InternalRow] = {
    val inputs = child.output
    val keys = grouping
    val fns = functions
    child.execute().mapPartitions { rows =>
      // The stored row's columns, as attributes of their own beside the batch row's.
      val stored = inputs.map(_.newInstance())
      val storedBuffers = stored.drop(keys.size)
      val mergedOnce = mergedExpressions(fns, Some(storedBuffers))
      val fromBoth = UnsafeProjection.create(keys ++ mergedOnce, stored ++ inputs)
      val fromBatch = UnsafeProjection.create(keys ++ mergedExpressions(fns, None), inputs)
      val heldKeyOf = UnsafeProjection.create(keys, inputs)
      val nextKeyOf = UnsafeProjection.create(keys, inputs)
      val joined = new JoinedRow
      new Iterator[InternalRow] {
        private var held: UnsafeRow = null
        override def hasNext: Boolean = held != null || rows.hasNext
        override def next(): InternalRow = {
          val first = if (held != null) held else rows.next().asInstanceOf[UnsafeRow].copy()
          held = null
          if (rows.hasNext) {
            val second = rows.next().asInstanceOf[UnsafeRow]
            if (heldKeyOf(first) == nextKeyOf(second)) return fromBoth(joined(first, second))
            held = second.copy()
          }
          fromBatch(first)
        }
      }
    }
  }

  /** Each function's buffer after merging into its initial values the stored row's buffer
   *  (`storedBuffers`, when given), then the batch row's (the functions' input buffers). */
  private def mergedExpressions(fns: Seq[DeclarativeAggregate], storedBuffers: Option[Seq[Attribute]]): Seq[Expression] = {
    val storedOf = storedBuffers.map(s => fns.zip(AggregateBuffers.slices(fns, s)).toMap)
    fns.flatMap { f =>
      val buffer = f.aggBufferAttributes.map(_.exprId)
      val initial = buffer.zip(f.initialValues).toMap
      val start: Map[ExprId, Expression] = storedOf match {
        case None => initial
        case Some(of) =>
          val fromStored = f.inputAggBufferAttributes.map(_.exprId).zip(of(f)).toMap
          buffer.zip(f.mergeExpressions.map(substitute(_, initial ++ fromStored))).toMap
      }
      f.mergeExpressions.map(substitute(_, start))
    }
  }

  override def simpleString(maxFields: Int): String =
    s"$nodeName [${grouping.mkString(", ")}], functions [${functions.mkString(", ")}]"

  override protected def withNewChildInternal(newChild: SparkPlan): StateMergeExec = copy(child = newChild)
}
