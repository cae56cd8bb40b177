package sluice.spark

import org.apache.spark.sql.execution.streaming.state.StateStoreProvider

/** spark-4.2: maintenance is one call, `doMaintenance` (in [[ProviderBase]]). */
private[spark] trait MaintenanceCalls extends StateStoreProvider
