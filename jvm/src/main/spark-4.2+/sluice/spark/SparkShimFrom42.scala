package sluice.spark

import org.apache.spark.sql.execution.streaming.checkpointing.{OffsetSeqLog, OffsetSeqMetadata}
import org.apache.spark.sql.execution.streaming.state.{ReadStateStore, StateStore, StateStoreProvider}
import org.apache.spark.sql.internal.SQLConf

/**
 * What `SparkShim` does the same way on Spark 4.2 and later.
 *
 * spark-4.2: an offset log entry is an `OffsetSeqBase` (v1 or v2 format) whose `metadataOpt` is an
 * `OffsetSeqMetadataBase`; `getStore` and `upgradeReadStoreToWriteStore` carry `forceSnapshotOnCommit`
 * (and `loadEmpty`).
 */
private[spark] trait SparkShimFrom42 {

  /** The entry of `batchId` in an offset log, if the log has one with metadata. */
  def offsetLogEntry(log: OffsetSeqLog, batchId: Long): Option[OffsetLogEntry] =
    log.get(batchId).flatMap(_.metadataOpt).map(m => OffsetLogEntry(m.batchWatermarkMs, m.batchTimestampMs, m.conf))

  /** Sets on `conf` the SQL settings the latest entry of `log` recorded (as a restarted query does). */
  def applyRecordedConf(log: OffsetSeqLog, conf: SQLConf): Unit =
    log.getLatest().flatMap(e => e._2.metadataOpt).foreach(m => OffsetSeqMetadata.setSessionConf(m, conf))

  /** Opens a writable store of another provider (a delegate), passing `options` on. */
  def openStore(p: StateStoreProvider, version: Long, ckptId: Option[String], options: OpenOptions): StateStore =
    p.getStore(version, ckptId, options.forceSnapshotOnCommit, options.loadEmpty)

  def upgradeStore(p: StateStoreProvider, readStore: ReadStateStore, version: Long, ckptId: Option[String],
      options: OpenOptions): StateStore = {
    if (options.loadEmpty) openStore(p, version, ckptId, options)
    else p.upgradeReadStoreToWriteStore(readStore, version, ckptId, options.forceSnapshotOnCommit)
  }
}
