package sluice.cache.internal

import org.apache.spark.sql.catalyst.expressions.Attribute
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, UnaryNode}

/**
 * Marks where an emission cache was asked for (commit interval > 0) but not placed, and why: it
 * does nothing at run time and exists so that `explain()` shows the reason.
 */
private[sluice] case class EmitCacheSkipped(reason: String, child: LogicalPlan) extends UnaryNode {
  override def output: Seq[Attribute] = child.output
  override protected def withNewChildInternal(newChild: LogicalPlan): EmitCacheSkipped = copy(child = newChild)
}
