package org.apache.spark.sql.sluice

import org.apache.spark.sql.catalyst.expressions.Attribute
import org.apache.spark.sql.catalyst.plans.logical._

/**
 * A sluice stateful logical node (suppress, emission cache). Its state operator id is
 * [[operatorIdBase]] + its pre-order position among the plan's nodes of the same kind:
 * deterministic across restarts of the same query and clear of Spark's own ids (0, 1, ...). Each
 * kind has its own range, so adding or removing one kind (the emission cache follows a conf key)
 * never renumbers the state of another.
 */
trait SluiceStatefulNode extends UnaryNode {
  override def output: Seq[Attribute] = child.output

  /** First state operator id of this kind of node. */
  def operatorIdBase: Long
}
