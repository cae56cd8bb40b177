package sluice.spark

import org.apache.spark.sql.execution.streaming.state.ReadStateStore

/** spark-4.2: a read store cannot be told of a column family (`registerColFamily` came in 4.3). */
private[spark] trait ColumnFamilyRegistration extends ReadStateStore
