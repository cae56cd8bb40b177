package org.apache.spark.sql.kafka010.sluice

import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeRead
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeRead.RecordStatus

/**
 * A real-time reader as this minor's interface asks: spark-4.1: `nextWithTimeout(timeoutMs)` is the
 * one abstract read; 4.2 replaced it by `nextWithTimeout(startTimeMs, timeoutMs)`.
 */
private[sluice] trait RealTimeReads[T] extends SupportsRealTimeRead[T] {

  /** The next record within `timeoutMs`, if one comes. */
  def nextRecord(timeoutMs: Long): RecordStatus

  override def nextWithTimeout(timeoutMs: java.lang.Long): RecordStatus = nextRecord(timeoutMs)
}
