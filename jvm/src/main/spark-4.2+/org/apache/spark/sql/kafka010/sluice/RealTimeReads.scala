package org.apache.spark.sql.kafka010.sluice

import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeRead
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeRead.RecordStatus

/**
 * A real-time reader as this minor's interface asks: from spark-4.2 Spark calls
 * `nextWithTimeout(startTimeMs, timeoutMs)` (abstract in 4.2; in 4.3 both forms have defaults, the
 * two-argument one being what Spark calls).
 */
private[sluice] trait RealTimeReads[T] extends SupportsRealTimeRead[T] {

  /** The next record within `timeoutMs`, if one comes. */
  def nextRecord(timeoutMs: Long): RecordStatus

  override def nextWithTimeout(startTimeMs: java.lang.Long, timeoutMs: java.lang.Long): RecordStatus =
    nextRecord(timeoutMs)
}
