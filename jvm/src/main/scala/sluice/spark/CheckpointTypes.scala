package sluice.spark

/**
 * Spark's checkpoint file classes under the names feature code uses (why aliases: see
 * [[StateStoreTypes]]).
 */
object CheckpointTypes {
  type CheckpointFileManager = org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager
  val CheckpointFileManager = org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager
  type CancellableFSDataOutputStream =
    org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.CancellableFSDataOutputStream
  type CommitLog = org.apache.spark.sql.execution.streaming.checkpointing.CommitLog
  type OffsetSeqLog = org.apache.spark.sql.execution.streaming.checkpointing.OffsetSeqLog
}
