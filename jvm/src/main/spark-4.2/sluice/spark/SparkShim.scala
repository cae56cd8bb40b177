package sluice.spark

import org.apache.spark.sql.execution.datasources.DataSource
import org.apache.spark.sql.execution.streaming.checkpointing.{OffsetSeqLog, OffsetSeqMetadata}
import org.apache.spark.sql.execution.streaming.state.{ReadStateStore, StateStore, StateStoreProvider}
import org.apache.spark.sql.internal.SQLConf

/**
 * The Spark 4.2 side of the seam: the only place where sluice's sources differ between Spark
 * minors. Each of jvm/src/main/spark-<minor>/ holds a file of this name with the same members;
 * the build compiles the one of its minor (build.sbt), so the choice is made once, at build time.
 *
 * spark-4.2: an offset log entry is an `OffsetSeqBase` (v1 or v2 format) whose `metadataOpt` is an
 * `OffsetSeqMetadataBase`; `DataSource` gained a ninth field, the user's name for a streaming source.
 */
object SparkShim {
  /** The Spark minor this jar is compiled for; the plugin refuses any other at start. */
  val sparkMinor: String = "4.2"

  /** The entry of `batchId` in an offset log, if the log has one with metadata. */
  def offsetLogEntry(log: OffsetSeqLog, batchId: Long): Option[OffsetLogEntry] =
    log.get(batchId).flatMap(_.metadataOpt).map(m => OffsetLogEntry(m.batchWatermarkMs, m.batchTimestampMs, m.conf))

  /** Sets on `conf` the SQL settings the latest entry of `log` recorded (as a restarted query does). */
  def applyRecordedConf(log: OffsetSeqLog, conf: SQLConf): Unit =
    log.getLatest().flatMap(e => e._2.metadataOpt).foreach(m => OffsetSeqMetadata.setSessionConf(m, conf))

  /**
   * A `DataSource` that copies every field of `ds` (the field list differs between minors); a
   * subclass overrides how the source is created.
   */
  abstract class DataSourceCopy(ds: DataSource)
    extends DataSource(ds.sparkSession, ds.className, ds.paths, ds.userSpecifiedSchema,
      ds.partitionColumns, ds.bucketSpec, ds.options, ds.catalogTable, ds.userSpecifiedStreamingSourceName)

  /** Opens a writable store of another provider (a delegate), passing `options` on. */
  def openStore(p: StateStoreProvider, version: Long, ckptId: Option[String], options: OpenOptions): StateStore =
    p.getStore(version, ckptId, options.forceSnapshotOnCommit, options.loadEmpty)

  def upgradeStore(p: StateStoreProvider, readStore: ReadStateStore, version: Long, ckptId: Option[String],
      options: OpenOptions): StateStore = {
    if (options.loadEmpty) openStore(p, version, ckptId, options)
    else p.upgradeReadStoreToWriteStore(readStore, version, ckptId, options.forceSnapshotOnCommit)
  }

  /** Runs maintenance of another provider (a delegate). */
  def maintain(p: StateStoreProvider, work: Maintenance): Unit = p.doMaintenance()
}
