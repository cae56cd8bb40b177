package org.apache.spark.sql.sluice

import org.apache.hadoop.conf.Configuration

import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.Attribute
import org.apache.spark.sql.catalyst.plans.physical.{AllTuples, ClusteredDistribution, Distribution}
import org.apache.spark.sql.execution.UnaryExecNode
import org.apache.spark.sql.execution.streaming.operators.stateful.{
  StatefulOperatorPartitioning, StatefulOperatorStateInfo,
  StatefulOpStateStoreCheckpointInfo, StateStoreWriter
}
import org.apache.spark.sql.execution.metric.SQLMetric
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.streaming.StateOperatorProgress
import org.apache.spark.sql.types.StructType

/**
 * The head of a sluice exec that keeps one state store (default column family) per partition and
 * holds rows until they are due: state info and schema validation, distribution on its keys, the
 * start of a batch, no-data batches when something held is due ([[nextDue]]), and
 * `mapPartitionsWithStore`, which works around the RocksDB StateStoreThreadLocalTracker pitfall.
 */
trait SluiceStateStoreExec extends UnaryExecNode with StateStoreWriter {
  def context: Option[StreamContext]

  /** Partitioning keys (child attributes); empty = one partition (like a global aggregation). */
  def keyAttributes: Seq[Attribute]
  def stateKeySchema: StructType
  def stateValueSchema: StructType

  /**
   * Late rows an operator below drops for this one, which the query's progress reports as this
   * operator's `numRowsDroppedByWatermark` (Spark's session restore drops a session window's late
   * rows before the operator that saves its sessions; Spark's own session save reports them so).
   */
  protected def droppedBelow: Option[SQLMetric] = None

  override def getProgress(): StateOperatorProgress = {
    val progress = super.getProgress()
    droppedBelow.fold(progress)(d => ProgressCopy.withDroppedByWatermark(progress, d.value))
  }

  /** The name [[nextDue]] is registered under. */
  protected def nextDueName: String

  /**
   * Whether rows held until `next` (the earliest such time left after the last batch, over all
   * partitions) are due in a batch without input, run at watermark `newInputWatermark`.
   */
  protected def dueWithoutInput(next: Long, newInputWatermark: Long): Boolean

  /**
   * The earliest time a row the operator holds becomes due, over all partitions: each task adds its
   * partition's, the driver reads it once the batch is done.
   */
  @transient protected lazy val nextDue: MinMetric = MinMetric.registered(sparkContext, nextDueName)

  /**
   * The time on the trigger clock of the query running on this thread, the clock Spark stamps each
   * batch with: the system clock unless a test drives the query's clock (sluice.testing does). Read
   * on the driver when Spark asks whether a batch without input is due (the stream thread, where
   * the batch about to be planned was just stamped with this clock); off a stream thread, the
   * system clock.
   */
  protected def queryClockMs: Long =
    StatefulOperatorSupport.currentStream(session).map(_.triggerClock.getTimeMillis())
      .getOrElse(System.currentTimeMillis())

  // Every no-data batch commits a new version of every store: run one only when something is due.
  override def shouldRunAnotherBatch(newInputWatermark: Long): Boolean = {
    val next = nextDue.value
    next != Long.MaxValue && dueWithoutInput(next, newInputWatermark)
  }

  /**
   * The batch's context, for `doExecute` to start with on the driver: the metrics are registered and
   * [[nextDue]] starts afresh for the batch's tasks. Outside a running query (no batch) it fails
   * with `notInQuery`.
   */
  protected def startBatch(notInQuery: String): StreamContext = {
    metrics // register the metrics on the driver
    val ctx = context.getOrElse(throw new IllegalStateException(notInQuery))
    nextDue.reset()
    ctx
  }

  /** Runs a partition's commits, their time added to the operator's commit time. */
  protected def timedCommit[A](commit: => A): A = {
    var result: Option[A] = None
    longMetric("commitTimeMs") += timeTakenMs { result = Some(commit) }
    result.get
  }

  /** Adds a partition's rows of the batch: those it output and those it updated in its state. */
  protected def addRows(output: Long, updated: Long): Unit = {
    longMetric("numOutputRows") += output
    longMetric("numUpdatedStateRows") += updated
  }

  override def stateInfo: Option[StatefulOperatorStateInfo] = context.map(_.stateInfo)
  override def output: Seq[Attribute] = child.output
  override def outputPartitioning = child.outputPartitioning

  override def requiredChildDistribution: Seq[Distribution] =
    if (keyAttributes.isEmpty) AllTuples :: Nil
    else stateInfo match {
      case Some(info) => StatefulOperatorPartitioning.getCompatibleDistribution(keyAttributes, info, conf) :: Nil
      case None => ClusteredDistribution(keyAttributes) :: Nil
    }

  override def validateAndMaybeEvolveStateSchema(
      hadoopConf: Configuration, batchId: Long, stateSchemaVersion: Int): List[StateSchemaValidationResult] = {
    val schema = List(StateStoreColFamilySchema(StateStore.DEFAULT_COL_FAMILY_NAME, 0, stateKeySchema, 0,
        stateValueSchema))
    List(StateSchemaCompatibilityChecker.validateAndMaybeEvolveStateSchema(getStateInfo, hadoopConf, schema,
        session.sessionState, stateSchemaVersion))
  }

  /**
   * Runs `f` on each partition with its state store. `f` must commit the store (and then call
   * `setStoreMetrics`) before its iterator ends; an uncommitted store is aborted at task end.
   */
  protected def mapPartitionsWithStore(
      f: (StateStore, Iterator[InternalRow]) => Iterator[InternalRow]): RDD[InternalRow] =
    withStore(child.execute(), f)

  /**
   * As [[mapPartitionsWithStore]], with `f` given the number of tasks that feed each partition
   * through the nearest shuffle below this operator (its map tasks, numbered by their partition; 1
   * without a shuffle).
   */
  protected def mapPartitionsWithStoreAndUpstreams(
      f: Int => (StateStore, Iterator[InternalRow]) => Iterator[InternalRow]): RDD[InternalRow] = {
    val input = child.execute()
    withStore(input, f(StatefulOperatorSupport.upstreamTasks(input)))
  }

  private def withStore(input: RDD[InternalRow],
      f: (StateStore, Iterator[InternalRow]) => Iterator[InternalRow]): RDD[InternalRow] = {
    // An upstream ReadStateStoreRDD (the aggregation's restore) leaves its read store in the
    // thread-local tracker until task end; our StateStoreRDD would then try to upgrade that
    // foreign store. Clear it once the upstream stores are open (the aggregation keeps its own).
    val cleared = input.mapPartitions { iter =>
      StateStoreThreadLocalTracker.clearStore()
      iter
    }
    cleared.mapPartitionsWithStateStore(
      getStateInfo, stateKeySchema, stateValueSchema, NoPrefixKeyStateEncoderSpec(stateKeySchema),
      session.sessionState, Some(session.streams.stateStoreCoordinator))(f)
  }

  /**
   * Runs `f` on each partition with its state store, keys scanned by their first `numColsPrefixKey`
   * columns, for an operator whose child reads the same store first (Spark's session-window restore,
   * given this operator's state info): Spark hands the task's read store on to it, as it does to
   * its own session-window save. Commit as for [[mapPartitionsWithStore]].
   */
  protected def mapPartitionsWithPrefixStore(numColsPrefixKey: Int)(
      f: (StateStore, Iterator[InternalRow]) => Iterator[InternalRow]): RDD[InternalRow] =
    child.execute().mapPartitionsWithStateStore(
      getStateInfo, stateKeySchema, stateValueSchema,
      PrefixKeyScanStateEncoderSpec(stateKeySchema, numColsPrefixKey),
      session.sessionState, Some(session.streams.stateStoreCoordinator))(f)

  /** Exposed for subclasses in other packages. */
  protected def reportStoreMetrics(store: StateStore): Unit = {
    setStoreMetrics(store)
    setOperatorMetrics()
  }

  /**
   * The checkpoint info of a store the operator opened itself (a side store, whose provider is not
   * the query's, so `setStoreMetrics` does not apply): with state checkpoint ids on (format v2, as
   * real-time mode requires) Spark's commit needs an id for every partition of every stateful
   * operator. A side store is opened by version alone and has none: it reports its version as its
   * id, which Spark records and hands back only to this operator, whose stores do not read it.
   */
  protected def reportCheckpointInfo(store: StateStore): Unit =
    if (StatefulOperatorStateInfo.enableStateStoreCheckpointIds(conf)) {
      val i = store.getStateStoreCheckpointInfo()
      def id(version: Long, ckpt: Option[String]): Option[Array[String]] =
        Some(Array(ckpt.getOrElse(s"version-$version")))
      setStateStoreCheckpointInfo(StatefulOpStateStoreCheckpointInfo(i.partitionId, i.batchVersion,
          id(i.batchVersion, i.stateStoreCkptId),
          if (i.batchVersion > 1) id(i.batchVersion - 1, i.baseStateStoreCkptId)
          else i.baseStateStoreCkptId.map(Array(_))))
    }
}
