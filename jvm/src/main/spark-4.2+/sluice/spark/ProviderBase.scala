package sluice.spark

import org.apache.spark.sql.execution.streaming.state.{ReadStateStore, StateStore}

/**
 * The base of sluice's state store providers: Spark's ways of opening a writable store and of
 * asking for maintenance, whose signatures differ between minors, reach the provider as
 * `openStore`, `upgradeStore` and `maintain`; its `init`, the same on every minor, as `setUp`
 * ([[ProviderInit]]).
 *
 * spark-4.2 and later: `getStore` and `upgradeReadStoreToWriteStore` carry `forceSnapshotOnCommit` (and
 * `loadEmpty`). How maintenance is asked for differs between minors: see `MaintenanceCalls`.
 */
abstract class ProviderBase extends ProviderInit with MaintenanceCalls {

  /** A writable store at `version`. */
  protected def openStore(version: Long, ckptId: Option[String], options: OpenOptions): StateStore

  /** A writable store at `version`, continuing `readStore` (opened by this provider) when it can. */
  protected def upgradeStore(readStore: ReadStateStore, version: Long, ckptId: Option[String],
      options: OpenOptions): StateStore

  /** Background maintenance: snapshots, cleanup of files no retained version needs, or both. */
  protected[sluice] def maintain(work: Maintenance): Unit

  final override def getStore(version: Long, stateStoreCkptId: Option[String],
      forceSnapshotOnCommit: Boolean, loadEmpty: Boolean): StateStore =
    openStore(version, stateStoreCkptId, OpenOptions(forceSnapshotOnCommit, loadEmpty))

  final override def upgradeReadStoreToWriteStore(readStore: ReadStateStore, version: Long,
      uniqueId: Option[String], forceSnapshotOnCommit: Boolean): StateStore =
    upgradeStore(readStore, version, uniqueId, OpenOptions(forceSnapshotOnCommit = forceSnapshotOnCommit))

  final override def doMaintenance(): Unit = maintain(Maintenance.All)
}
