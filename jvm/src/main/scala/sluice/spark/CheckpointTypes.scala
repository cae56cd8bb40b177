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
  object CommitLog {
    def apply(session: org.apache.spark.sql.SparkSession, path: String): CommitLog =
      new org.apache.spark.sql.execution.streaming.checkpointing.CommitLog(session, path)
  }
  type OffsetSeqLog = org.apache.spark.sql.execution.streaming.checkpointing.OffsetSeqLog
  object OffsetSeqLog {
    def apply(session: org.apache.spark.sql.SparkSession, path: String): OffsetSeqLog =
      new org.apache.spark.sql.execution.streaming.checkpointing.OffsetSeqLog(session, path)
  }
}

/**
 * Spark's cancellable checkpoint output stream as a base class over `out`: a subclass calls Spark's
 * constructor through this one (see [[StateStoreTypes]] on what feature code builds).
 */
abstract class CancellableOutputStream(out: java.io.OutputStream)
  extends org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.CancellableFSDataOutputStream(
    out)
