package sluice.cache.internal

import org.apache.spark.sql.catalyst.expressions.Attribute
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.sluice.SluiceStatefulNode

import sluice.conf.SluiceConf

/** The emission cache above one update-mode streaming aggregation; `keys` are its grouping columns. */
private[sluice] case class EmitCacheNode(keys: Seq[Attribute], intervalMs: Long, child: LogicalPlan)
  extends SluiceStatefulNode {
  override protected def withNewChildInternal(newChild: LogicalPlan): EmitCacheNode = copy(child = newChild)
  override def operatorIdBase: Long = SluiceConf.EmitCacheIds.from
}
