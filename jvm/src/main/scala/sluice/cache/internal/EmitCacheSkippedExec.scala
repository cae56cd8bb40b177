package sluice.cache.internal

import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Attribute, SortOrder}

import sluice.spark.PlanTypes.{SparkPlan, UnaryExecNode}

/** Physical form of [[EmitCacheSkipped]]: passes its child's rows through unchanged. */
private[sluice] case class EmitCacheSkippedExec(reason: String, child: SparkPlan) extends UnaryExecNode {
  override def output: Seq[Attribute] = child.output
  override def outputPartitioning = child.outputPartitioning
  override def outputOrdering: Seq[SortOrder] = child.outputOrdering
  override protected def doExecute(): RDD[InternalRow] = child.execute()
  override def simpleString(maxFields: Int): String = s"EmitCacheSkipped [$reason]"
  override protected def withNewChildInternal(newChild: SparkPlan): EmitCacheSkippedExec = copy(child = newChild)
}
