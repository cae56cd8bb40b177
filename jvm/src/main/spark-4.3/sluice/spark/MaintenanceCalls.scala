package sluice.spark

import org.apache.spark.sql.execution.streaming.state.StateStoreProvider

/** spark-4.3: maintenance may also come as separate snapshot and cleanup calls. */
private[spark] trait MaintenanceCalls extends StateStoreProvider { self: ProviderBase =>
  final override def doSnapshotMaintenance(): Unit = maintain(Maintenance.Snapshot)
  final override def doCleanupMaintenance(): Unit = maintain(Maintenance.Cleanup)
}
