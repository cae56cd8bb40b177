package sluice.suppress.internal

import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.sluice.SluiceStatefulNode

import sluice.conf.SluiceConf
import sluice.suppress._

/**
 * `suppress` above a streaming aggregation. `keys` are the aggregation's grouping columns (child
 * attributes), `window` the time-window struct among them, `graceMs` its grace period (the
 * watermark delay unless `untilWindowCloses` was given a smaller one) and `time` the `time_col`
 * expression of `untilTimeLimit`. `earlyMs` is the watermark delay minus the grace (0 without a
 * grace of its own): how far past Spark's watermark suppress closes windows (see
 * [[SuppressExec.closeTime]]). Over a session-window aggregation in update
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
    retracted: Option[Attribute] = None,
    earlyMs: Long = 0L)
  extends SluiceStatefulNode {
  override protected def withNewChildInternal(newChild: LogicalPlan): SuppressNode = copy(child = newChild)
  override def operatorIdBase: Long = SluiceConf.SuppressIds.from
}
