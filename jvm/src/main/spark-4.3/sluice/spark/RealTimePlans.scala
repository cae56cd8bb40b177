package sluice.spark

import org.apache.spark.sql.connector.catalog.Table
import org.apache.spark.sql.execution.SparkPlan
import org.apache.spark.sql.execution.datasources.v2.RealTimeStreamScanExec
import org.apache.spark.sql.execution.streaming.{RealTimeTrigger, StatefulStreamlineAggregateExec}
import org.apache.spark.sql.execution.streaming.runtime.{
  IncrementalExecution, MicroBatchExecution, RealTimeModeAllowlist,
  StreamExecution
}
import org.apache.spark.sql.internal.SQLConf

/**
 * Spark's real-time mode as sluice needs it (spark-4.3: stateful real-time queries arrived here;
 * 4.1 and 4.2 have a same-named object that answers "no").
 */
object RealTimePlans {

  /** Whether this Spark runs stateful queries under the real-time trigger. */
  val supported: Boolean = true

  /** Spark's switch for its real-time operator and sink allowlist. */
  val AllowlistCheckKey: String = SQLConf.STREAMING_REAL_TIME_MODE_ALLOWLIST_CHECK.key

  /** Whether `exec` plans a batch of a real-time query: Spark's own flag, set from the trigger per run. */
  def isRealTime(exec: IncrementalExecution): Boolean = exec.isRealTimeMode

  /** Whether `stream` runs micro-batches: not continuous processing, nor real time (told by its trigger). */
  def runsMicroBatches(stream: StreamExecution): Boolean = stream match {
    case m: MicroBatchExecution => !m.trigger.isInstanceOf[RealTimeTrigger]
    case _ => false
  }

  /** Whether `plan` reads a source in real time (the only plans Spark's allowlist looks at). */
  def readsInRealTime(plan: SparkPlan): Boolean = plan.exists(_.isInstanceOf[RealTimeStreamScanExec])

  /**
   * Spark's own allowlist check, throwing Spark's own error, on `plan` with the nodes `elide`
   * picks replaced by their only child, and on `sink`. There is no API to add classes to the
   * allowlist, so sluice's operators are taken out of the plan Spark checks instead.
   */
  def checkAllowlist(plan: SparkPlan, elide: SparkPlan => Boolean, sink: Option[Table]): Unit = {
    val elided = plan.transformUp { case p if elide(p) && p.children.size == 1 => p.children.head }
    RealTimeModeAllowlist.checkAllowedPhysicalOperator(elided, true)
    sink.foreach(RealTimeModeAllowlist.checkAllowedSink(_, true))
  }

  /**
   * `plan` with its first real-time streaming aggregation (top down) judging no row late and
   * evicting only windows ending at or before `evictionMs` (and Spark's own eviction watermark), none
   * with None. Spark's aggregation drops a row as late, and evicts a window, by the batch's
   * watermark: the largest event time any task has seen minus the delay. The suppress above judges
   * both by its own partition's clock instead (see sluice.suppress.internal.RealTimeEviction). An
   * aggregation sluice has replaced already (a subclass of Spark's) is left as it is.
   */
  def aggregationByStreamTime(plan: SparkPlan, evictionMs: Option[Long]): SparkPlan = {
    var done = false
    plan.transformDown {
      case a: StatefulStreamlineAggregateExec if !done =>
        done = true
        if (a.getClass != classOf[StatefulStreamlineAggregateExec]) a
        else a.copy(eventTimeWatermarkForLateEvents = None,
          eventTimeWatermarkForEviction = for {
            e <- evictionMs
            spark <- a.eventTimeWatermarkForEviction
          } yield math.min(e, spark))
    }
  }
}
