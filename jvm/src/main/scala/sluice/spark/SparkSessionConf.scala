package sluice.spark

import org.apache.spark.sql.internal.SQLConf

import sluice.spark.StateStoreTypes.StateStoreConf

/**
 * The Spark SQL settings sluice reads or sets, in sluice's terms: feature code never names `SQLConf`.
 */
object SparkSessionConf {

  /** `spark.sql.streaming.stateStore.providerClass`. */
  val ProviderClassKey: String = SQLConf.STATE_STORE_PROVIDER_CLASS.key

  /** `spark.sql.streaming.stateStore.checkpointFormatVersion`. */
  val CheckpointFormatKey: String = SQLConf.STATE_STORE_CHECKPOINT_FORMAT_VERSION.key
  def defaultCheckpointFormat: Int = SQLConf.STATE_STORE_CHECKPOINT_FORMAT_VERSION.defaultValue.get

  /** The prefix of the checkpoint file manager setting (`spark.sql.streaming.checkpointFileManagerClass`). */
  val CheckpointFileManagerKey: String = SQLConf.STREAMING_CHECKPOINT_FILE_MANAGER_CLASS.parent.key

  /** The state format of session-window aggregations (`spark.sql.streaming.sessionWindow.stateFormatVersion`). */
  def sessionWindowStateFormat(conf: SQLConf): Int = conf.getConf(SQLConf.STREAMING_SESSION_WINDOW_STATE_FORMAT_VERSION)

  /** `spark.sql.streaming.sessionWindow.merge.sessions.in.local.partition`. */
  val MergeSessionsInLocalPartitionKey: String = SQLConf.STREAMING_SESSION_WINDOW_MERGE_SESSIONS_IN_LOCAL_PARTITION.key

  /**
   * Whether sessions are merged within an input partition before the shuffle, where the session
   * sets it (from the builder, the Spark conf or `spark.conf.set`); None where it is left unset.
   */
  def mergeSessionsInLocalPartition(conf: SQLConf): Option[Boolean] =
    if (conf.contains(MergeSessionsInLocalPartitionKey)) Some(conf.streamingSessionWindowMergeSessionInLocalPartition)
    else None

  /**
   * The store settings of a side store, a store sluice opens beside an operator's own (the emission
   * cache's, suppress's spill store, the inspector's reads): `base`'s settings, then `recorded` (what
   * a checkpoint's offset log recorded), then provider `providerClass` with plain batch-id versions.
   * Side stores never use checkpoint ids, whatever the query's checkpoint format.
   */
  def sideStoreConf(base: SQLConf, providerClass: String, recorded: SQLConf => Unit = _ => ()): StateStoreConf = {
    val conf = base.clone()
    recorded(conf)
    conf.setConfString(ProviderClassKey, providerClass)
    conf.setConfString(CheckpointFormatKey, "1")
    new StateStoreConf(conf)
  }
}
