package sluice.suppress.internal

import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.sluice.SluiceStatefulNode

import sluice.conf.SluiceConf
import sluice.suppress._

/**
 * `suppress` above a streaming aggregation. `keys` are the aggregation's grouping columns (child
 * attributes), `window` the time-window struct among them, `graceMs` its watermark delay and
 * `time` the `time_col` expression of `untilTimeLimit`. Over a session-window aggregation in update
 * mode, `retracted` is the column that marks a merged-away session's row (set by sluice.sessions
 * when the query starts; see [[SuppressExec]] for what each mode does with such a row).
 */
private[sluice] case class SuppressNode(
    suppressed: Suppressed,
    keys: Seq[Attribute],
    window: Option[Attribute],
    graceMs: Long,
    time: Option[Expression],
    child: LogicalPlan,
    retracted: Option[Attribute] = None) extends SluiceStatefulNode {
  override protected def withNewChildInternal(newChild: LogicalPlan): SuppressNode = copy(child = newChild)
  override def operatorIdBase: Long = SluiceConf.SuppressIds.from
}
