package sluice.cache.internal

import scala.util.Try

import org.apache.hadoop.fs.Path

import org.apache.spark.TaskContext
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.internal.Logging
import org.apache.spark.sql.streaming.OutputMode
import org.apache.spark.sql.types.StructType

import org.apache.spark.sql.sluice.{MinMetric, SluiceStateStoreExec, SluiceStatefulNode, StatefulOperatorSupport, StreamContext}
import org.json4s.JsonDSL._

import sluice.conf.{MemoryBudget, SluiceConf, SluiceConfException}
import sluice.spark.PlanTypes.{SparkPlan, SparkStrategy, UnaryExecNode}
import sluice.spark.PlanTypes.{StatefulOperatorCustomMetric, StatefulOperatorCustomSumMetric}
import sluice.spark.PlanTypes.{WriteToMicroBatchDataSource, WriteToMicroBatchDataSourceV1}
import sluice.spark.StateStoreTypes._
import sluice.spark.{RealTimeMode, SessionConf}
import sluice.state.Sidecars
import sluice.suppress.internal.SuppressNode
import sluice.windowstore.InMemoryWindowStoreProvider

/** The emission cache above one update-mode streaming aggregation; `keys` are its grouping columns. */
private[sluice] case class EmitCacheNode(keys: Seq[Attribute], intervalMs: Long, child: LogicalPlan) extends SluiceStatefulNode {
  override protected def withNewChildInternal(newChild: LogicalPlan): EmitCacheNode = copy(child = newChild)
  override def operatorIdBase: Long = SluiceConf.EmitCacheIds.from
}

/**
 * Marks where an emission cache was asked for (commit interval > 0) but not placed, and why: it
 * does nothing at run time and exists so that `explain()` shows the reason.
 */
private[sluice] case class EmitCacheSkipped(reason: String, child: LogicalPlan) extends UnaryNode {
  override def output: Seq[Attribute] = child.output
  override protected def withNewChildInternal(newChild: LogicalPlan): EmitCacheSkipped = copy(child = newChild)
}

/**
 * Optimizer rule (installed by sluice.plugin.SluiceExtensions): with `spark.sluice.commit.interval.ms`
 * > 0, puts an [[EmitCacheNode]] directly below the sink of an update-mode query, above the
 * query's last stateful operator when that operator is a streaming aggregation.
 *
 * Placement rule (what makes it safe): the cache delays rows, so nothing stateful may sit above it.
 * A stateful operator above an aggregation (suppress, deduplication, another aggregation) must see
 * every row the aggregation produced in the batch it produced it: suppress closes windows by the
 * watermark, and a row held back past the watermark would arrive after its window was closed and
 * be dropped as late. So the rule walks down from the sink through stateless operators only; if the
 * first stateful operator it meets is an aggregation the cache goes right above it, otherwise no
 * cache is added, and the plan shows an [[EmitCacheSkipped]] with the reason (logged once per query).
 *
 * It runs only while a query plans a micro-batch (the output mode comes from that batch's
 * execution); with interval 0 it still keeps a node where the checkpoint already has emission-cache
 * state, so rows held before the change are forwarded instead of lost.
 */
private[sluice] case class EmitCacheRule(session: SparkSession) extends Rule[LogicalPlan] with Logging {
  override def apply(plan: LogicalPlan): LogicalPlan = {
    if (!plan.isStreaming || plan.exists(p => p.isInstanceOf[EmitCacheNode] || p.isInstanceOf[EmitCacheSkipped])) {
      return plan
    }
    val stream = StatefulOperatorSupport.currentStream(session)
    val exec = stream.flatMap(s => Option(s.lastExecution))
    exec match {
      case Some(e) =>
        val interval = SluiceConf(session.conf.getAll).commitIntervalMs
        if (interval > 0 && StatefulOperatorSupport.isRealTime(session)) {
          throw new SluiceConfException(RealTimeMode.refusal(
            s"The emission cache (${SluiceConf.CommitIntervalMs.key}=$interval)",
            "it forwards the rows it holds at batch boundaries",
            s"Set ${SluiceConf.CommitIntervalMs.key}=0 for this query, or " + RealTimeMode.UseMicroBatches.head.toLower +
              RealTimeMode.UseMicroBatches.tail))
        }
        val update = e.outputMode == OutputMode.Update()
        var index = 0 // the plan has no EmitCacheNode yet (checked above)
        def place(p: LogicalPlan): LogicalPlan = p match {
          case a: Aggregate if a.child.isStreaming && update && groupingOutput(a).nonEmpty =>
            val id = SluiceConf.EmitCacheIds.from + index
            index += 1
            if (interval > 0 || hasState(e.checkpointLocation, id)) EmitCacheNode(groupingOutput(a), interval, a)
            else a
          case top if isStateful(top) => if (interval > 0) skip(top, whyNot(top, e.outputMode)) else top
          case other if passesThrough(other) => other.mapChildren(place)
          case other => other
        }
        place(plan)
      case None => plan
    }
  }

  private def whyNot(top: LogicalPlan, mode: OutputMode): String = top match {
    case _: Aggregate if mode != OutputMode.Update() =>
      s"the output mode is $mode; the emission cache deduplicates update-mode output only"
    case _: Aggregate => "the aggregation's output does not keep all of its grouping columns"
    case _: SuppressNode => "the query ends in suppress, which already decides when each row is emitted; a " +
      "cache below it would hold rows past the watermark that closes their windows"
    case other => s"the last stateful operator (${other.nodeName}) is not an aggregation; the cache sits " +
      "only directly below the sink, above an update-mode aggregation"
  }

  private def skip(top: LogicalPlan, reason: String): LogicalPlan = {
    StatefulOperatorSupport.currentStream(session).foreach { s =>
      if (EmitCacheRule.loggedQueries.add(s.runId)) {
        logWarning(s"Query ${s.id}: ${SluiceConf.CommitIntervalMs.key} > 0 but no emission cache is added: $reason.")
      }
    }
    EmitCacheSkipped(reason, top)
  }

  /** Operators that keep state across micro-batches. */
  private def isStateful(p: LogicalPlan): Boolean =
    p.isInstanceOf[SluiceStatefulNode] || StatefulOperatorSupport.isSparkStateful(p)

  /** Stateless operators (and the sink's write node) the rule may look through. */
  private def passesThrough(p: LogicalPlan): Boolean = p match {
    case _: Project | _: Filter | _: SubqueryAlias | _: Union | _: SerializeFromObject | _: DeserializeToObject |
         _: MapElements | _: MapPartitions | _: TypedFilter | _: Generate | _: EventTimeWatermark |
         _: Repartition | _: RepartitionByExpression | _: ResolvedHint | _: WriteToMicroBatchDataSource |
         _: WriteToMicroBatchDataSourceV1 => true
    case _ => false
  }

  private def hasState(stateRoot: String, operatorId: Long): Boolean =
    EmitCacheExec.hasState(session, stateRoot, operatorId)

  /** Output attributes of `agg` that are its grouping expressions. */
  private def groupingOutput(agg: Aggregate): Seq[Attribute] = {
    val keys = agg.aggregateExpressions.flatMap {
      case a: Attribute if agg.groupingExpressions.exists {
        case g: Attribute => g.exprId == a.exprId
        case _ => false
      } => Some(a)
      case al @ Alias(child, _) if agg.groupingExpressions.exists(_.semanticEquals(child)) => Some(al.toAttribute)
      case _ => None
    }
    // Without every grouping column in the output, rows of two groups could not be told apart.
    if (keys.size == agg.groupingExpressions.size) keys else Nil
  }
}

private[sluice] object EmitCacheRule {
  /** Query runs whose skipped emission cache was already logged. */
  private val loggedQueries = java.util.concurrent.ConcurrentHashMap.newKeySet[java.util.UUID]()
}

/** Plans [[EmitCacheNode]]s and [[EmitCacheSkipped]] markers. */
private[sluice] case class EmitCacheStrategy(session: SparkSession) extends SparkStrategy {
  override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
    case n: EmitCacheNode =>
      // The interval, for sluice.inspect to tell when each held row is due.
      Sidecars.record(session, n,
        ("kind" -> "emitCache") ~ ("intervalMs" -> n.intervalMs) ~ ("keys" -> n.keys.map(_.name).toList))
      EmitCacheExec(n.keys, n.intervalMs, StatefulOperatorSupport.streamContext(session, n), planLater(n.child)) :: Nil
    case EmitCacheSkipped(reason, child) => EmitCacheSkippedExec(reason, planLater(child)) :: Nil
    case _ => Nil
  }
}

/** Physical form of [[EmitCacheSkipped]]: passes its child's rows through unchanged. */
private[sluice] case class EmitCacheSkippedExec(reason: String, child: SparkPlan) extends UnaryExecNode {
  override def output: Seq[Attribute] = child.output
  override def outputPartitioning = child.outputPartitioning
  override def outputOrdering: Seq[SortOrder] = child.outputOrdering
  override protected def doExecute(): RDD[InternalRow] = child.execute()
  override def simpleString(maxFields: Int): String = s"EmitCacheSkipped [$reason]"
  override protected def withNewChildInternal(newChild: SparkPlan): EmitCacheSkippedExec = copy(child = newChild)
}

/** The emission cache's rows in a state store, keys wrapped as one binary column (see [[EmitLayout]]). */
private[sluice] final class UnsafeStoreAdapter(store: StateStore, layout: EmitLayout) extends EmitStore {
  override def get(key: UnsafeRow): UnsafeRow = store.get(layout.storeKey(key))
  override def put(key: UnsafeRow, value: UnsafeRow): Unit = store.put(layout.storeKey(key), value)
  override def remove(key: UnsafeRow): Unit = store.remove(layout.storeKey(key))
  override def iterator(): Iterator[(UnsafeRow, UnsafeRow)] =
    store.iterator().map(p => (layout.groupingKey(p.key), p.value))
}

private[sluice] case class EmitCacheExec(
    keys: Seq[Attribute],
    intervalMs: Long,
    context: Option[StreamContext],
    child: SparkPlan) extends SluiceStateStoreExec {

  private val layout = new EmitLayout(DataTypeUtils.fromAttributes(keys), DataTypeUtils.fromAttributes(child.output))
  override def keyAttributes: Seq[Attribute] = keys
  override def stateKeySchema: StructType = layout.storeKeySchema
  override def stateValueSchema: StructType = layout.valueSchema
  override def shortName: String = EmitCacheStateLayout.OperatorName

  override protected def customStatefulOperatorMetrics: Seq[StatefulOperatorCustomMetric] = Seq(
    StatefulOperatorCustomSumMetric("emitCacheForwardedTotal", "rows forwarded downstream by the emission cache"),
    StatefulOperatorCustomSumMetric("emitCacheAbsorbedTotal", "updates replaced in the emission cache unforwarded"),
    StatefulOperatorCustomSumMetric("emitCacheBytes", "bytes held by the emission cache"),
    StatefulOperatorCustomSumMetric("emitCacheEvictTotal", "rows forwarded early because the cache was full"),
    StatefulOperatorCustomSumMetric("emitCacheIndexRebuildTotal",
      "partitions whose emission cache index was rebuilt by a scan of the store (a restart, a replay, a moved partition)"))

  /** Earliest time a held row becomes due, over all partitions (driver side, after the batch). */
  @transient private lazy val nextDue: MinMetric = MinMetric.registered(sparkContext, "emission cache next flush time")

  // A no-data batch runs only when a partition holds rows whose interval has elapsed.
  override def shouldRunAnotherBatch(newInputWatermark: Long): Boolean = {
    val next = nextDue.value
    next != Long.MaxValue && next <= System.currentTimeMillis()
  }

  override protected def doExecute(): RDD[InternalRow] = {
    metrics // register the metrics on the driver
    val ctx = context.getOrElse(throw new IllegalStateException(
      "the emission cache runs only inside a streaming query"))
    val due = nextDue
    due.reset()
    val batchMs = ctx.batchTimestampMs
    val batchId = ctx.batchId
    val interval = intervalMs
    val lay = layout
    val output = child.output
    val keyExprs = keys
    val info = ctx.stateInfo
    val storeConf = EmitCacheExec.storeConf(session)
    val hadoopConf = StatefulOperatorSupport.runHadoopConf(session, info.queryRunId)
    val bothCaches = MemoryBudget.bothCaches(conf.stateStoreProviderClass, intervalMs)
    val firstVersion = EmitCacheExec.firstVersion(session, info.checkpointLocation, info.operatorId, info.storeVersion)

    child.execute().mapPartitionsWithIndex { (partition, iter) =>
      // The aggregation's restore leaves its read store in this thread-local (see
      // StatefulOperatorSupport.mapPartitionsWithStore); its own store is already open by now.
      StateStoreThreadLocalTracker.clearStore()
      val id = StateStoreProviderId(StateStoreId(info.checkpointLocation, info.operatorId, partition), info.queryRunId)
      firstVersion.foreach(v => InMemoryWindowStoreProvider.startEmpty(id.storeId.storeCheckpointLocation(),
        hadoopConf.value.value, v))
      val store = StateStore.get(id, lay.storeKeySchema, lay.valueSchema, NoPrefixKeyStateEncoderSpec(lay.storeKeySchema),
        info.storeVersion, None, None, useColumnFamilies = false, storeConf, hadoopConf.value.value)
      TaskContext.get().addTaskCompletionListener[Unit](_ => if (!store.hasCommitted) store.abort())
      val keyProj = UnsafeProjection.create(keyExprs, output)
      // The executor's own slot count (its conf), not the driver's.
      val share = EmitCacheExec.partitionShare(info.numPartitions, bothCaches)
      EmitIndexCache.retainLoaded()
      val held = new UnsafeStoreAdapter(store, lay)
      val cached = EmitIndexCache.take(id, store.version, None)
      val index = cached.getOrElse(EmitIndex.scan(lay, held))
      val cache = new EmissionCache(lay, held, index, share, interval, batchMs, batchId)
      iter.foreach(row => cache.update(keyProj(row).copy(), row))
      var forwardedRows = 0L
      val forwarded = cache.finish().map { r => forwardedRows += 1; r }
      // Rows leave as the sink pulls them; the store commits once the last has gone.
      StatefulOperatorSupport.onCompletion(forwarded) {
        val s = cache.stats
        var version = 0L
        longMetric("commitTimeMs") += timeTakenMs { version = store.commit() }
        EmitIndexCache.offer(id, version, None, index)
        if (cached.isEmpty) longMetric("emitCacheIndexRebuildTotal") += 1
        // The store's provider differs from the query's: report only the provider-independent metrics.
        val storeMetrics = store.metrics
        longMetric("numTotalStateRows") += storeMetrics.numKeys
        longMetric("stateMemory") += storeMetrics.memoryUsedBytes
        longMetric("numOutputRows") += forwardedRows
        longMetric("numUpdatedStateRows") += s.entries
        longMetric("emitCacheForwardedTotal") += s.forwarded
        longMetric("emitCacheAbsorbedTotal") += s.absorbed
        longMetric("emitCacheBytes") += s.bytes
        longMetric("emitCacheEvictTotal") += s.evicted
        if (s.nextDueMs != Long.MaxValue) due.add(s.nextDueMs)
      }
    }
  }

  override protected def withNewChildInternal(newChild: SparkPlan): EmitCacheExec = copy(child = newChild)
}

private[sluice] object EmitCacheExec {
  /**
   * Bytes one partition of the emission cache may hold: the executor budget C (halved when the
   * record cache takes the other half, see [[MemoryBudget.bothCaches]]) over max(T, N), T the
   * executor's task slots and N the operator's partitions.
   *
   * Determinism rule: what a partition forwards early may depend only on its own state and input,
   * so that a replayed batch emits exactly what it emitted before. The share is therefore a function
   * of configuration and partition count alone, never of what other partitions or queries hold in
   * the same slot or executor, nor of timing. Kafka lets a thread's tasks compete for one cache;
   * that would make early forwarding depend on scheduling here. With C/max(T, N), one query's
   * emission cache holds at most C on any executor (even with all N partitions there) and a
   * partition never more than its slot's share C/T.
   */
  def partitionShare(numPartitions: Int, bothCaches: Boolean): Long = {
    val budget = MemoryBudget.current
    val total = MemoryBudget.cacheShare(budget.cacheMaxBytes, bothCaches)
    total / math.max(1, math.max(budget.taskSlots, numPartitions))
  }

  /**
   * The emission cache keeps its rows in sluice's in-memory store whatever the query's provider:
   * its state is bounded by the cache's byte share, so memory is the right place, and that store
   * updates its one live map in place and writes only the batch's changes (one small delta file per
   * version). Spark's HDFS-backed store copies its map every version (spark-4.1: and writes each
   * delta through a checksum file manager that hands the bytes to another thread pool); that commit
   * would cost more than everything else the emission cache does (bench/cache/README.md). The store keys
   * are one binary column (see [[EmitLayout]]), so the window store never treats a windowed
   * grouping key as a window to expire.
   */
  /** Beside the operator's stores: the batch version its stores started empty at (see `firstVersion`). */
  private val FirstVersionFile = "_sluice_emit_cache_first_version"

  /**
   * The version the operator's stores started at when the query ran batches before it had an
   * emission cache (a commit interval set on an existing checkpoint), recorded by the driver the
   * first time; None for an operator that started with the query (version 0, as every store).
   * A store with no file starts empty at this version ([[InMemoryWindowStoreProvider.startEmpty]]),
   * also when that first batch is replayed; one that lost its files after it fails to load.
   */
  def firstVersion(session: SparkSession, stateRoot: String, operatorId: Long, version: Long): Option[Long] = {
    val dir = new Path(stateRoot, operatorId.toString)
    val fs = dir.getFileSystem(session.sessionState.newHadoopConf())
    val marker = new Path(dir, FirstVersionFile)
    if (fs.exists(marker)) {
      val in = fs.open(marker)
      try Some(new String(in.readAllBytes(), java.nio.charset.StandardCharsets.UTF_8).trim.toLong) finally in.close()
    } else if (version > 0 && !hasStores(fs, dir, session.sessionState.newHadoopConf())) {
      fs.mkdirs(dir)
      val out = fs.create(marker, false)
      try out.write(version.toString.getBytes(java.nio.charset.StandardCharsets.UTF_8)) finally out.close()
      Some(version)
    } else None
  }

  // A store directory per partition, named by its number, holding a version: the operator's
  // directory also holds sluice.inspect's settings and Spark's schema files, both written when the
  // batch is planned.
  private def hasStores(fs: org.apache.hadoop.fs.FileSystem, dir: Path, conf: org.apache.hadoop.conf.Configuration)
      : Boolean =
    fs.exists(dir) && fs.listStatus(dir).exists { s =>
      s.isDirectory && s.getPath.getName.forall(_.isDigit) && InMemoryWindowStoreProvider.hasVersions(s.getPath, conf)
    }

  /** Whether the checkpoint's state root holds a directory for operator `operatorId`. */
  def hasState(session: SparkSession, stateRoot: String, operatorId: Long): Boolean = Try {
    val p = new Path(stateRoot, operatorId.toString)
    p.getFileSystem(session.sessionState.newHadoopConf()).exists(p)
  }.getOrElse(false)

  def storeConf(session: SparkSession): StateStoreConf = {
    SessionConf.sideStoreConf(session.sessionState.conf, EmitCacheStateLayout.ProviderClass)
  }
}
