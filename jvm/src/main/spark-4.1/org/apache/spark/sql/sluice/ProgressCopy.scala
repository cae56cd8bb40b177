package org.apache.spark.sql.sluice

import org.apache.spark.sql.streaming.StateOperatorProgress

/** A state operator's progress with other counts: Spark 4.1's `copy` takes two of them. */
private[sluice] object ProgressCopy {
  def withDroppedByWatermark(p: StateOperatorProgress, dropped: Long): StateOperatorProgress =
    p.copy(newNumRowsUpdated = p.numRowsUpdated, newNumRowsDroppedByWatermark = dropped)
}
