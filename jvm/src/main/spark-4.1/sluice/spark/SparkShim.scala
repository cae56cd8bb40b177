package sluice.spark

import org.apache.spark.sql.execution.streaming.checkpointing.{OffsetSeqLog, OffsetSeqMetadata}
import org.apache.spark.sql.execution.streaming.state.{ReadStateStore, StateStore, StateStoreProvider}
import org.apache.spark.sql.internal.SQLConf

/**
 * The Spark 4.1 side of the seam. Each supported minor has an object of this name with the same
 * members; the build compiles the one of its minor (build.sbt: jvm/src/main/spark-<minor>/ and the
 * range folders spark-<from>+/ that include it), so the choice is made once, at build time.
 *
 * spark-4.1: an offset log entry is an `OffsetSeq` whose `metadata` is an `OffsetSeqMetadata`.
 */
object SparkShim {

  /** The Spark minor this jar is compiled for; the plugin refuses any other at start. */
  val sparkMinor: String = "4.1"

  /** The entry of `batchId` in an offset log, if the log has one with metadata. */
  def offsetLogEntry(log: OffsetSeqLog, batchId: Long): Option[OffsetLogEntry] =
    log.get(batchId).flatMap(_.metadata).map(m => OffsetLogEntry(m.batchWatermarkMs, m.batchTimestampMs, m.conf))

  /** Sets on `conf` the SQL settings the latest entry of `log` recorded (as a restarted query does). */
  def applyRecordedConf(log: OffsetSeqLog, conf: SQLConf): Unit =
    log.getLatest().flatMap(e => e._2.metadata).foreach(m => OffsetSeqMetadata.setSessionConf(m, conf))

  /** Opens a writable store of another provider (a delegate), passing `options` on. */
  def openStore(p: StateStoreProvider, version: Long, ckptId: Option[String], options: OpenOptions): StateStore = {
    refuseOptions(p, options)
    p.getStore(version, ckptId)
  }

  def upgradeStore(p: StateStoreProvider, readStore: ReadStateStore, version: Long, ckptId: Option[String],
      options: OpenOptions): StateStore = {
    refuseOptions(p, options)
    p.upgradeReadStoreToWriteStore(readStore, version, ckptId)
  }

  // spark-4.1: Spark never sets them; a sluice caller passing them on could only be a bug.
  private def refuseOptions(p: StateStoreProvider, options: OpenOptions): Unit =
    if (options != OpenOptions.Default) {
      throw new UnsupportedOperationException(s"Spark 4.1 cannot open $p with $options")
    }

  /** Runs maintenance of another provider (a delegate). */
  def maintain(p: StateStoreProvider, work: Maintenance): Unit = p.doMaintenance()
}
