package org.apache.spark.sql.sluice

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state.{RecordType, StateStore, SupportsFineGrainedReplay}
import org.apache.spark.util.NextIterator

/**
 * A provider whose versions another provider replays (Spark's state data source options
 * `readChangeFeed` and `snapshotStartBatchId`). Here because the change feed's type is Spark's
 * `private[spark]` `NextIterator`.
 */
trait DelegatedReplay extends SupportsFineGrainedReplay {

  /** The provider that replays this one's versions for `option`; throws, naming why, when none does. */
  protected def replayedBy(option: String, readOnly: Boolean): SupportsFineGrainedReplay

  final override def getStateStoreChangeDataReader(startVersion: Long, endVersion: Long,
      colFamilyNameOpt: Option[String], endVersionStateStoreCkptId: Option[String])
      : NextIterator[(RecordType.Value, UnsafeRow, UnsafeRow, Long)] =
    replayedBy("readChangeFeed", readOnly = true)
      .getStateStoreChangeDataReader(startVersion, endVersion, colFamilyNameOpt, endVersionStateStoreCkptId)

  final override def replayStateFromSnapshot(snapshotVersion: Long, endVersion: Long, readOnly: Boolean,
      snapshotVersionStateStoreCkptId: Option[String], endVersionStateStoreCkptId: Option[String]): StateStore =
    replayedBy("snapshotStartBatchId", readOnly).replayStateFromSnapshot(snapshotVersion, endVersion, readOnly,
      snapshotVersionStateStoreCkptId, endVersionStateStoreCkptId)
}
