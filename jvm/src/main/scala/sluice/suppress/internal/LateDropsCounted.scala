package sluice.suppress.internal

import sluice.spark.PlanTypes.SQLMetric

/**
 * A plan node below suppress that drops rows as late for it (late records taken out at the
 * aggregation's input, sessions a grace closed in their save): what it drops counts in the late-drop
 * metrics the query's progress reports for suppress (or, fused, for the aggregation), handed over on
 * the driver before the batch runs. Plan nodes are copied as the plan is prepared, so the metric
 * objects are handed over on the final plan rather than shared when it is built.
 */
private[sluice] trait LateDropsCounted {
  @transient @volatile private var counters: Seq[SQLMetric] = Nil

  /** Counts this node's late drops into `metrics` from now on. */
  def countInto(metrics: Seq[SQLMetric]): Unit = counters = metrics

  /** The metrics this node's late drops count in. */
  protected def lateDropCounters: Seq[SQLMetric] = counters
}
