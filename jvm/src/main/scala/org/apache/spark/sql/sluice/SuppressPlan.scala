package org.apache.spark.sql.sluice

import org.apache.spark.TaskContext
import org.apache.spark.broadcast.Broadcast
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.{AnalysisException, DataFrame, SparkSession}
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.catalyst.streaming.{InternalOutputModes, WriteToStream}
import org.apache.spark.sql.classic.{Dataset => ClassicDataset}
import org.apache.spark.sql.execution.{SparkPlan, SparkStrategy}
import org.apache.spark.sql.execution.metric.SQLMetric
import org.apache.spark.sql.execution.streaming.operators.stateful.{StatefulOperatorCustomMetric, StatefulOperatorCustomSumMetric, StatefulOperatorStateInfo}
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types.{StructType, TimestampNTZType, TimestampType}
import org.apache.spark.util.{CompletionIterator, SerializableConfiguration}

import sluice.suppress._


/**
 * `suppress` above a streaming aggregation. `keys` are the aggregation's grouping columns (child
 * attributes), `window` the time-window struct among them, `graceMs` its watermark delay and
 * `time` the `time_col` expression of `untilTimeLimit`.
 */
case class SuppressNode(
    suppressed: Suppressed,
    keys: Seq[Attribute],
    window: Option[Attribute],
    graceMs: Long,
    time: Option[Expression],
    child: LogicalPlan) extends SluiceStatefulNode {
  override protected def withNewChildInternal(newChild: LogicalPlan): SuppressNode = copy(child = newChild)
  override def operatorIdBase: Long = StatefulOperatorSupport.SuppressIdBase
}

object SuppressPlanner {
  private def fail(msg: String): Nothing = throw new SuppressUsageException(msg)

  /** Builds `suppress(df)`, checking every misuse that the plan reveals. */
  def build(df: DataFrame, suppressed: Suppressed, timeCol: Option[String]): DataFrame = {
    val ds = df.asInstanceOf[ClassicDataset[_]]
    val plan = ds.queryExecution.analyzed
    if (!plan.isStreaming) {
      fail("suppress needs a streaming DataFrame (from spark.readStream); for a batch DataFrame the " +
        "aggregation result is already final.")
    }
    val agg = findAggregate(plan).getOrElse(fail(
      "suppress needs the result of a streaming aggregation, e.g. df.groupBy(F.window(\"ts\", \"1 hour\"), " +
        "\"user\").count(); apply suppress directly to that result."))
    val keys = groupingOutput(agg)
    val missing = keys.filterNot(k => plan.output.exists(_.exprId == k.exprId))
    if (missing.nonEmpty) {
      fail(s"suppress needs the aggregation's grouping columns in its input; " +
        s"${missing.map(_.name).mkString(", ")} were dropped: keep them in the DataFrame.")
    }
    if (keys.exists(k => k.metadata.contains(SessionWindow.marker))) {
      fail("suppress does not support session windows: Spark does not run session-window aggregations in " +
        "update mode, and its append output mode already emits one final result per session; use " +
        "outputMode(\"append\") without suppress.")
    }
    val window = keys.find(k => k.metadata.contains(TimeWindow.marker))
    var graceMs = 0L
    suppressed match {
      case _: UntilWindowCloses =>
        val w = window.getOrElse(fail("suppress(until_window_closes) needs a time window among the grouping " +
          "columns: group by F.window(<event-time column>, <duration>) (and other keys) before suppress."))
        if (!w.metadata.contains(EventTimeWatermark.delayKey)) {
          fail("suppress(until_window_closes) needs a watermark on the window's event-time column: call " +
            "df.withWatermark(\"<event-time column>\", \"<grace period>\") before the aggregation; the watermark " +
            "delay is the grace period.")
        }
        graceMs = w.metadata.getLong(EventTimeWatermark.delayKey)
      case _ =>
    }
    val time = (suppressed, timeCol) match {
      case (_: UntilTimeLimit, None) =>
        fail("suppress(until_time_limit) needs time_col: the timestamp column whose value is a row's event time " +
          "(e.g. F.max(\"ts\").alias(\"ts\") in the aggregation, or \"window.end\").")
      case (_: UntilTimeLimit, Some(name)) =>
        val e = scala.util.Try(ds.resolve(name)).getOrElse(
          fail(s"time_col '$name' is not a column of the DataFrame; columns: ${plan.output.map(_.name).mkString(", ")}"))
        if (e.dataType != TimestampType && e.dataType != TimestampNTZType) {
          fail(s"time_col '$name' must be a timestamp column, but it is ${e.dataType.simpleString}.")
        }
        Some(e match { case Alias(child, _) => child; case other => other })
      case (_, Some(name)) =>
        fail(s"time_col ('$name') is only used by until_time_limit; ${suppressed.describe} takes its time from " +
          "the window end or the wall clock.")
      case _ => None
    }
    ClassicDataset.ofRows(ds.sparkSession, SuppressNode(suppressed, keys, window, graceMs, time, plan))
  }

  /** The aggregation whose result `plan` is, looking through aliases and column-keeping projections. */
  private def findAggregate(plan: LogicalPlan): Option[Aggregate] = plan match {
    case a: Aggregate => Some(a)
    case s: SubqueryAlias => findAggregate(s.child)
    case p: Project if p.projectList.forall(_.isInstanceOf[Attribute]) => findAggregate(p.child)
    case s: SuppressNode => findAggregate(s.child) // suppress of a suppressed aggregation
    case _ => None
  }

  /**
   * Output attributes of `agg` that are its grouping expressions, in grouping order (so that the
   * aggregation's hash partitioning already satisfies suppress: no extra shuffle).
   */
  private def groupingOutput(agg: Aggregate): Seq[Attribute] = agg.groupingExpressions.flatMap { g =>
    agg.aggregateExpressions.collectFirst {
      case a: Attribute if g.isInstanceOf[Attribute] && g.asInstanceOf[Attribute].exprId == a.exprId => a
      case al @ Alias(child, _) if child.semanticEquals(g) => al.toAttribute
    }
  }
}

/** Plans [[SuppressNode]]s; installed by sluice.plugin.SluiceExtensions. */
case class SuppressStrategy(session: SparkSession) extends SparkStrategy {
  override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
    case n: SuppressNode =>
      val ctx = StatefulOperatorSupport.streamContext(session, n)
      ctx.foreach(c => SuppressChecks.requireUpdateMode(c.outputMode.toString))
      // The sidecar (mode, limit and bound for sluice.inspect) only beside a suppress operator's own
      // state: on the fused path there is none, and its directory would read as unfused state.
      FusedFinal.plan(session, n, ctx).getOrElse {
        sluice.inspect.Sidecars.record(session, n)
        SuppressExec(n.suppressed, n.keys, n.window, n.graceMs, n.time, ctx, planLater(n.child))
      } :: Nil
    case _ => Nil
  }
}

object SuppressChecks {
  def outputModeError(mode: String): AnalysisException = new AnalysisException(
    s"suppress needs the query's output mode to be update, but it is $mode: start the query with " +
      "writeStream.outputMode(\"update\"). (Suppress itself turns an update-mode aggregation into final " +
      "or rate-limited results.)",
    None, None, None, None, Map.empty[String, String], Array.empty)

  def requireUpdateMode(mode: String): Unit =
    if (!mode.equalsIgnoreCase("update")) throw outputModeError(mode)

  /** Check rule: a streaming write of a plan with suppress must use update mode (fails `start()`). */
  def checkRule(session: SparkSession): LogicalPlan => Unit = plan => plan.foreach {
    case w: WriteToStream if w.outputMode != InternalOutputModes.Update &&
        w.inputQuery.exists(_.isInstanceOf[SuppressNode]) =>
      throw outputModeError(w.outputMode.toString)
    case _ =>
  }
}

/** Custom SQLMetrics combined by max or average instead of sum (across tasks). */
private[sluice] final class CombinedMetric(kind: String) extends SQLMetric("sum", -1L) {
  private var sum = 0L
  private var count = 0L
  private var max = -1L
  override def copy(): CombinedMetric = {
    val m = new CombinedMetric(kind); m.sum = sum; m.count = count; m.max = max; m
  }
  override def reset(): Unit = { sum = 0; count = 0; max = -1 }
  override def isZero: Boolean = count == 0
  override def add(v: Long): Unit = if (v >= 0) { sum += v; count += 1; max = math.max(max, v) }
  override def set(v: Long): Unit = { reset(); add(v) }
  override def merge(other: org.apache.spark.util.AccumulatorV2[Long, Long]): Unit = other match {
    case o: CombinedMetric => sum += o.sum; count += o.count; max = math.max(max, o.max)
    case _ => throw new UnsupportedOperationException(s"cannot merge ${other.getClass}")
  }
  override def value: Long = if (count == 0) 0 else if (kind == "max") max else sum / count
  /** For an average: adds `total` over `n` observations. */
  def addMany(total: Long, n: Long): Unit = if (n > 0) {
    sum += total; count += n; max = math.max(max, total / n)
  }
}

private[sluice] case class CombinedCustomMetric(name: String, desc: String, kind: String)
    extends StatefulOperatorCustomMetric {
  override def createSQLMetric(sparkContext: org.apache.spark.SparkContext): SQLMetric = {
    val m = new CombinedMetric(kind)
    m.register(sparkContext, Some(desc), countFailedValues = false)
    m
  }
}


/**
 * The buffer indexes of one task's stores, from [[BufferIndexCache]] (keyed by the store's
 * provider id) when it holds the version opened, else rebuilt by one scan of the store.
 */
private[sluice] final class SuppressIndexes(runId: java.util.UUID, layout: BufferLayout) {
  var rebuilt = 0L

  private def key(store: StateStore): StateStoreProviderId = StateStoreProviderId(store.id, runId)

  def open(store: StateStore, checkpointId: Option[String]): IndexedStore = {
    // Indexes of stores this executor no longer has loaded (other runs, moved partitions) go.
    BufferIndexCache.retain {
      case id: StateStoreProviderId => StateStore.isLoaded(id)
      case _ => true
    }
    val buffer = new StateStoreBuffer(store)
    val index = BufferIndexCache.take(key(store), store.version, checkpointId).getOrElse {
      rebuilt += 1
      IndexedStore.scan(layout, buffer)
    }
    new IndexedStore(buffer, index)
  }

  def committed(store: StateStore, version: Long, checkpointId: Option[String], index: BufferIndex): Unit =
    BufferIndexCache.offer(key(store), version, checkpointId, index)
}

/** [[BufferStore]] over a state store's default column family. */
private[sluice] final class StateStoreBuffer(store: StateStore) extends BufferStore {
  override def get(key: UnsafeRow): UnsafeRow = store.get(key)
  override def put(key: UnsafeRow, value: UnsafeRow): Unit = store.put(key, value)
  override def remove(key: UnsafeRow): Unit = store.remove(key)
  override def iterator(): Iterator[(UnsafeRow, UnsafeRow)] = store.iterator().map(p => (p.key, p.value))
}

case class SuppressExec(
    suppressed: Suppressed,
    keys: Seq[Attribute],
    window: Option[Attribute],
    graceMs: Long,
    time: Option[Expression],
    context: Option[StreamContext],
    child: SparkPlan) extends SluiceStateStoreExec {

  private val layout = new BufferLayout(DataTypeUtils.fromAttributes(keys), DataTypeUtils.fromAttributes(child.output))
  override def keyAttributes: Seq[Attribute] = keys
  override def stateKeySchema: StructType = layout.keySchema
  override def stateValueSchema: StructType = layout.valueSchema
  override def shortName: String = "suppress"

  private def operatorName: String =
    suppressed.name.getOrElse(s"suppress#${context.map(_.stateInfo.operatorId).getOrElse("?")}")

  override protected def customStatefulOperatorMetrics: Seq[StatefulOperatorCustomMetric] = Seq(
    StatefulOperatorCustomSumMetric("suppressionEmitTotal", "rows emitted by suppress when due"),
    StatefulOperatorCustomSumMetric("intermediateResultSuppressionTotal", "updates absorbed by suppress"),
    StatefulOperatorCustomSumMetric("suppressionBufferRecords", "rows in the suppress buffers (in memory)"),
    StatefulOperatorCustomSumMetric("suppressionBufferBytes", "bytes in the suppress buffers (in memory)"),
    CombinedCustomMetric("suppressionBufferBytesMax", "largest suppress buffer (bytes, one partition)", "max"),
    StatefulOperatorCustomSumMetric("suppressionEvictTotal", "rows emitted early because a buffer was full"),
    StatefulOperatorCustomSumMetric("suppressionDiskBufferBytes", "bytes of suppress buffers spilled to disk"),
    StatefulOperatorCustomSumMetric("suppressionIndexRebuildTotal",
      "suppress buffer indexes rebuilt by a full store scan (when a store is loaded)"),
    CombinedCustomMetric("recordLatenessMaxMs", "largest lateness of a row reaching suppress", "max"),
    CombinedCustomMetric("recordLatenessAvgMs", "average lateness of rows reaching suppress", "avg"),
    StatefulOperatorCustomSumMetric("lateRecordDropTotal", "rows dropped by suppress as late"))

  /** Earliest buffer time left after the batch, over all partitions (driver side after the batch). */
  @transient private lazy val nextBufferTime: MinMetric = MinMetric.registered(sparkContext, "suppress next buffer time")

  override def shouldRunAnotherBatch(newInputWatermark: Long): Boolean = {
    val next = nextBufferTime.value
    next != Long.MaxValue && (suppressed match {
      case _: UntilWindowCloses => next <= newInputWatermark
      case w: UntilWallClockTimeLimit => next + w.limitMs <= System.currentTimeMillis()
      case _: UntilTimeLimit => false // stream time advances only with input
    })
  }

  override protected def doExecute(): RDD[InternalRow] = {
    metrics // register the metrics on the driver
    val ctx = context.getOrElse(throw new IllegalStateException(
      "suppress runs only inside a streaming query (writeStream...start())"))
    val nextTime = nextBufferTime
    nextTime.reset()
    val evictWm = ctx.evictionWatermarkMs
    val lateWm = ctx.lateEventsWatermarkMs
    val now = ctx.batchTimestampMs
    val mode = suppressed
    val config = mode.buffer
    val name = operatorName
    val grace = graceMs
    val lay = layout
    val output = child.output
    val keyExprs = keys
    val windowOrdinal = window.map(w => output.indexWhere(_.exprId == w.exprId))
    val timeExpr = time
    val spill = if (config.whenFull == BufferFullStrategy.SpillToDisk) Some(spillSettings(ctx)) else None

    val checkpointIds = StatefulOperatorStateInfo.enableStateStoreCheckpointIds(conf)
    val loadedIds = ctx.stateInfo.stateStoreCkptIds
    val runId = ctx.stateInfo.queryRunId

    mapPartitionsWithStore { (store, iter) =>
      val partition = TaskContext.getPartitionId()
      val keyProj = UnsafeProjection.create(keyExprs, output)
      val timeProj = timeExpr.map(e => UnsafeProjection.create(Seq(e), output))
      val disk = spill.map(_.open(partition, lay))
      val indexes = new SuppressIndexes(runId, lay)
      val memoryPart = indexes.open(store, loadedIds.map(_(partition).head))
      // The spill store is opened by version alone (see SpillStore.open).
      val diskPart = disk.map(indexes.open(_, None))
      val buffer = new SuppressionBuffer(lay, memoryPart, diskPart, config, name, partition)
      var emitted = 0L
      var lateDropped = 0L
      var latenessSum = 0L
      var latenessCount = 0L
      var latenessMax = -1L
      def lateness(ms: Long): Unit = {
        val l = math.max(0L, ms)
        latenessSum += l; latenessCount += 1; latenessMax = math.max(latenessMax, l)
      }
      def keyOf(row: InternalRow): UnsafeRow = lay.key(keyProj(row))
      var beforeCommit: () => Unit = () => ()

      // Each input row is put and the bound applied at once (the in-memory part never exceeds it
      // by more than that row); what is due is released once the batch's rows are all in. Releasing
      // earlier would be wrong here, unlike in Kafka Streams, which sees one record at a time: a
      // micro-batch's rows arrive in no fixed order and all belong to the same moment (one
      // watermark, one stream time), so a row later in the batch may still update an entry that is
      // due, which would then be emitted twice, and what is emitted would depend on the order.
      // Rows flow out as they are released, never collected.
      val released: Iterator[InternalRow] = mode match {
        case _: UntilWindowCloses =>
          val ord = windowOrdinal.get
          // Buffer time = window end (ms): due once the watermark reaches it.
          val isDue = (t: Long) => t <= evictWm
          iter.flatMap { row =>
            val end = row.getStruct(ord, 2).getLong(1) / 1000
            if (end <= lateWm) {
              lateDropped += 1 // its window was closed (and emitted) by an earlier batch
              Iterator.empty
            } else {
              lateness(evictWm + grace - end)
              buffer.put(keyOf(row), row, end)
              buffer.enforceBound(isDue)
            }
          } ++ buffer.afterPut(isDue)
        case UntilTimeLimit(limit, _, _) =>
          val proj = timeProj.get
          var streamTime = buffer.storedStreamTime.getOrElse(Long.MinValue)
          val isDue = (t: Long) => streamTime != Long.MinValue && t <= streamTime - limit
          beforeCommit = () => if (streamTime != Long.MinValue) buffer.storeStreamTime(streamTime)
          iter.flatMap { row =>
            val tr = proj(row)
            val t = if (tr.isNullAt(0)) streamTime else tr.getLong(0) / 1000
            if (streamTime != Long.MinValue) lateness(streamTime - t)
            streamTime = math.max(streamTime, t)
            buffer.put(keyOf(row), row, t)
            buffer.enforceBound(isDue)
          } ++ buffer.afterPut(isDue) // by the batch's final stream time
        case UntilWallClockTimeLimit(limit, _, _) =>
          // The batch timestamp, not the task's clock: a replayed batch emits the same rows.
          val isDue = (t: Long) => t + limit <= now
          iter.flatMap { row =>
            buffer.put(keyOf(row), row, now)
            buffer.enforceBound(isDue)
          } ++ buffer.afterPut(isDue)
      }

      def complete(): Unit = {
        beforeCommit()
        val s = buffer.finish()
        longMetric("commitTimeMs") += timeTakenMs {
          val diskVersion = disk.map(_.commit())
          val version = store.commit()
          // Both stores committed: the indexes now reflect the versions just created.
          diskPart.foreach(p => indexes.committed(disk.get, diskVersion.get, None, p.index))
          val id = if (checkpointIds) store.getStateStoreCheckpointInfo().stateStoreCkptId else None
          indexes.committed(store, version, id, memoryPart.index)
        }
        reportStoreMetrics(store)
        longMetric("numOutputRows") += emitted
        longMetric("numUpdatedStateRows") += s.buffered
        longMetric("numRowsDroppedByWatermark") += lateDropped
        longMetric("suppressionEmitTotal") += s.emitted
        longMetric("intermediateResultSuppressionTotal") += s.absorbed
        longMetric("suppressionBufferRecords") += s.records
        longMetric("suppressionBufferBytes") += s.bytes
        longMetric("suppressionBufferBytesMax").add(s.bytesMax)
        longMetric("suppressionEvictTotal") += s.evicted
        longMetric("suppressionDiskBufferBytes") += s.diskBytes
        longMetric("suppressionIndexRebuildTotal") += indexes.rebuilt
        longMetric("lateRecordDropTotal") += lateDropped
        if (latenessCount > 0) {
          longMetric("recordLatenessMaxMs").add(latenessMax)
          longMetric("recordLatenessAvgMs").asInstanceOf[CombinedMetric].addMany(latenessSum, latenessCount)
        }
        if (s.minBufferTime != Long.MaxValue) nextTime.add(s.minBufferTime)
      }

      CompletionIterator[InternalRow, Iterator[InternalRow]](released.map { r => emitted += 1; r }, complete())
    }
  }

  /**
   * A bounded buffer's choices (which rows to evict or spill, whether it is full) depend on the
   * order its rows arrive in, and a shuffle's output order is not fixed across attempts: such a
   * buffer gets its rows sorted (by time then keys), so a replayed batch decides the same.
   */
  override def requiredChildOrdering: Seq[Seq[SortOrder]] =
    if (suppressed.buffer.isBounded) Seq((time.toSeq ++ keys).map(SortOrder(_, Ascending)))
    else Seq(Nil)

  /** The spill store: a RocksDB state store (local disk, checkpointed) beside the operator's own. */
  private def spillSettings(ctx: StreamContext): SpillStore = {
    val conf = session.sessionState.conf.clone()
    conf.setConfString(SQLConf.STATE_STORE_PROVIDER_CLASS.key,
      "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    SpillStore(ctx.stateInfo, new StateStoreConf(conf),
      StatefulOperatorSupport.runHadoopConf(session, ctx.stateInfo.queryRunId))
  }

  override protected def withNewChildInternal(newChild: SparkPlan): SuppressExec = copy(child = newChild)
}

private[sluice] case class SpillStore(
    info: org.apache.spark.sql.execution.streaming.operators.stateful.StatefulOperatorStateInfo,
    storeConf: StateStoreConf,
    hadoopConf: Broadcast[SerializableConfiguration]) {
  def open(partition: Int, layout: BufferLayout): StateStore = {
    val id = StateStoreProviderId(
      StateStoreId(info.checkpointLocation, info.operatorId, partition, SpillStore.Name), info.queryRunId)
    val store = StateStore.get(id, layout.keySchema, layout.valueSchema,
      NoPrefixKeyStateEncoderSpec(layout.keySchema), info.storeVersion, None, None,
      useColumnFamilies = false, storeConf, hadoopConf.value.value)
    TaskContext.get().addTaskCompletionListener[Unit](_ => if (!store.hasCommitted) store.abort())
    store
  }
}

private[sluice] object SpillStore {
  val Name = "suppressSpill"
}
