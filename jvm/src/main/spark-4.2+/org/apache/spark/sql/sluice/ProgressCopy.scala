package org.apache.spark.sql.sluice

import org.apache.spark.sql.streaming.StateOperatorProgress

/** A state operator's progress with other counts: from Spark 4.2 `copy` also takes the rows removed. */
private[sluice] object ProgressCopy {
  def withDroppedByWatermark(p: StateOperatorProgress, dropped: Long): StateOperatorProgress =
    p.copy(newNumRowsUpdated = p.numRowsUpdated, newNumRowsDroppedByWatermark = dropped,
      newNumRowsRemoved = p.numRowsRemoved)
}
