package org.apache.spark.sql.sluice

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state.{RecordType, StateStore, SupportsFineGrainedReplay}
import org.apache.spark.util.NextIterator

/**
 * A provider that answers Spark's change feed (the state data source's `readChangeFeed`) from
 * its own files. Here because the feed's type is Spark's `private[spark]` `NextIterator`.
 */
trait ReplayedChanges extends SupportsFineGrainedReplay {

  /** Every change of the versions `startVersion` to `endVersion`, in order: (a put, else a delete;
   *  key; value, null for a delete; the batch id, its version - 1, as Spark's feed reports it). */
  protected def changes(startVersion: Long, endVersion: Long): Iterator[(Boolean, UnsafeRow, UnsafeRow, Long)]

  /** The store of `endVersion` built from the snapshot of `snapshotVersion` and the deltas after it. */
  protected def fromSnapshot(snapshotVersion: Long, endVersion: Long): StateStore

  final override def getStateStoreChangeDataReader(startVersion: Long, endVersion: Long,
      colFamilyNameOpt: Option[String], endVersionStateStoreCkptId: Option[String])
      : NextIterator[(RecordType.Value, UnsafeRow, UnsafeRow, Long)] = {
    val all = changes(startVersion, endVersion)
    new NextIterator[(RecordType.Value, UnsafeRow, UnsafeRow, Long)] {
      override protected def getNext(): (RecordType.Value, UnsafeRow, UnsafeRow, Long) =
        if (!all.hasNext) { finished = true; null }
        else {
          val (put, key, value, batchId) = all.next()
          (if (put) RecordType.PUT_RECORD else RecordType.DELETE_RECORD, key, value, batchId)
        }
      override protected def close(): Unit = ()
    }
  }

  final override def replayStateFromSnapshot(snapshotVersion: Long, endVersion: Long, readOnly: Boolean,
      snapshotVersionStateStoreCkptId: Option[String], endVersionStateStoreCkptId: Option[String]): StateStore =
    fromSnapshot(snapshotVersion, endVersion)
}
