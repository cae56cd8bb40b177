package sluice.state

import org.apache.spark.TaskContext
import org.apache.spark.broadcast.Broadcast
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.types.StructType
import org.apache.spark.util.SerializableConfiguration

import sluice.spark.PlanTypes.StatefulOperatorStateInfo
import sluice.spark.SparkSessionConf
import sluice.spark.StateStoreTypes._

/**
 * A state store that an operator opens itself, beside the store Spark opens for it, with a provider
 * of its own choosing whatever the query's (the emission cache's rows, suppress's spill store): one
 * store named `storeName` per partition in the operator's state directory, at the batch's version.
 * Opened by that version alone, never with a checkpoint id, whatever the query's checkpoint format
 * ([[SparkSessionConf.sideStoreConf]]). Built on the driver while the batch is planned, opened in the
 * batch's tasks.
 */
private[sluice] final case class SideStore(
    info: StatefulOperatorStateInfo,
    storeName: String,
    storeConf: StateStoreConf,
    hadoopConf: Broadcast[SerializableConfiguration]) {

  /** The id of partition `partition`'s store (what executor caches of its contents are keyed by). */
  def id(partition: Int): StateStoreProviderId =
    StateStoreProviderId(StateStoreId(info.checkpointLocation, info.operatorId, partition, storeName), info.queryRunId)

  /** Partition `partition`'s store at the batch's version, aborted at the task's end unless it committed. */
  def open(partition: Int, keySchema: StructType, valueSchema: StructType): StateStore = {
    val store = StateStore.get(id(partition), keySchema, valueSchema, NoPrefixKeyStateEncoderSpec(keySchema),
      info.storeVersion, None, None, useColumnFamilies = false, storeConf, hadoopConf.value.value)
    TaskContext.get().addTaskCompletionListener[Unit](_ => if (!store.hasCommitted) store.abort())
    store
  }
}

private[sluice] object SideStore {

  /**
   * Store `storeName` beside the operator `info` describes, opened with provider `providerClass`
   * and the session's store settings ([[SparkSessionConf.sideStoreConf]]); `hadoopConf` is the query
   * run's (the bridge's `StatefulOperatorSupport.runHadoopConf`).
   */
  def beside(session: SparkSession, info: StatefulOperatorStateInfo, storeName: String, providerClass: String,
      hadoopConf: Broadcast[SerializableConfiguration]): SideStore =
    SideStore(info, storeName, SparkSessionConf.sideStoreConf(session.sessionState.conf, providerClass), hadoopConf)
}
