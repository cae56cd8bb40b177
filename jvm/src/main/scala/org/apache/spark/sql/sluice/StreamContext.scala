package org.apache.spark.sql.sluice

import scala.util.Try

import org.apache.spark.sql.execution.streaming.operators.stateful.StatefulOperatorStateInfo
import org.apache.spark.sql.execution.streaming.runtime.IncrementalExecution
import org.apache.spark.sql.streaming.OutputMode

/**
 * What a sluice operator learns from the running micro-batch when it is planned. Serializable so
 * that an exec holding it can be captured by task closures; the IncrementalExecution stays on the
 * driver.
 */
final class StreamContext(
    @transient val execution: IncrementalExecution,
    val stateInfo: StatefulOperatorStateInfo)
  extends Serializable {
  def batchId: Long = stateInfo.storeVersion
  def outputMode: OutputMode = execution.outputMode

  /** Wall-clock time of this batch, recorded in the offset log (the same when a batch replays). */
  def batchTimestampMs: Long = execution.offsetSeqMetadata.batchTimestampMs

  /** Event-time watermark for closing state in this batch (driver only, after planning). */
  def evictionWatermarkMs: Long =
    Try(execution.watermarkPropagator.getInputWatermarkForEviction(batchId, stateInfo.operatorId))
      .getOrElse(execution.offsetSeqMetadata.batchWatermarkMs)

  /** Watermark the previous batch closed state with: rows at or below it are late here. */
  def lateEventsWatermarkMs: Long =
    Try(execution.watermarkPropagator.getInputWatermarkForLateEvents(batchId, stateInfo.operatorId))
      .getOrElse(execution.prevOffsetSeqMetadata.map(_.batchWatermarkMs).getOrElse(0L))

  override def toString: String = s"StreamContext(batch=$batchId, op=${stateInfo.operatorId})"
}
