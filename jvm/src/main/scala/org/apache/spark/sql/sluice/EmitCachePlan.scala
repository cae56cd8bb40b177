package org.apache.spark.sql.sluice

import scala.collection.mutable.ArrayBuffer
import scala.util.Try

import org.apache.hadoop.fs.Path

import org.apache.spark.{SparkEnv, TaskContext}
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.execution.{SparkPlan, SparkStrategy}
import org.apache.spark.sql.execution.streaming.operators.stateful.{StatefulOperatorCustomMetric, StatefulOperatorCustomSumMetric}
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.streaming.OutputMode
import org.apache.spark.sql.types.StructType

import sluice.cache.{CachingStateStoreProvider, EmissionCache, EmitLayout, EmitStore, SlotCaches}
import sluice.conf.SluiceConf
import sluice.plugin.MemoryBudget
import sluice.windowstore.InMemoryWindowStoreProvider

/** The emission cache above one update-mode streaming aggregation; `keys` are its grouping columns. */
case class EmitCacheNode(keys: Seq[Attribute], intervalMs: Long, child: LogicalPlan) extends SluiceStatefulNode {
  override protected def withNewChildInternal(newChild: LogicalPlan): EmitCacheNode = copy(child = newChild)
  override def operatorIdBase: Long = StatefulOperatorSupport.EmitCacheIdBase
}

/**
 * Optimizer rule (installed by sluice.plugin.SluiceExtensions): with `spark.sluice.commit.interval.ms`
 * > 0, puts an [[EmitCacheNode]] above every streaming aggregation of an update-mode query. It runs
 * only while a query plans a micro-batch (the output mode comes from that batch's execution); with
 * interval 0 it still keeps a node where the checkpoint already has emission-cache state, so rows
 * held before the change are forwarded instead of lost.
 */
case class EmitCacheRule(session: SparkSession) extends Rule[LogicalPlan] {
  override def apply(plan: LogicalPlan): LogicalPlan = {
    if (!plan.isStreaming || plan.exists(_.isInstanceOf[EmitCacheNode])) return plan
    val exec = StatefulOperatorSupport.currentStream(session).flatMap(s => Option(s.lastExecution))
    exec match {
      case Some(e) if e.outputMode == OutputMode.Update() =>
        val interval = SluiceConf(session.conf.getAll).commitIntervalMs
        var index = 0 // the plan has no EmitCacheNode yet (checked above)
        plan.transformUp {
          case a: Aggregate if a.child.isStreaming && groupingOutput(a).nonEmpty =>
            val id = StatefulOperatorSupport.EmitCacheIdBase + index
            index += 1
            if (interval > 0 || hasState(e.checkpointLocation, id)) EmitCacheNode(groupingOutput(a), interval, a)
            else a
        }
      case _ => plan
    }
  }

  private def hasState(stateRoot: String, operatorId: Long): Boolean = Try {
    val p = new Path(stateRoot, operatorId.toString)
    p.getFileSystem(session.sessionState.newHadoopConf()).exists(p)
  }.getOrElse(false)

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

/** Plans [[EmitCacheNode]]s. */
case class EmitCacheStrategy(session: SparkSession) extends SparkStrategy {
  override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
    case n: EmitCacheNode =>
      EmitCacheExec(n.keys, n.intervalMs, StatefulOperatorSupport.streamContext(session, n), planLater(n.child)) :: Nil
    case _ => Nil
  }
}

/** The emission cache's rows in a state store, keys wrapped as one binary column (see [[EmitLayout]]). */
private[sluice] final class UnsafeStoreAdapter(store: StateStore, layout: EmitLayout) extends EmitStore {
  override def put(key: UnsafeRow, value: UnsafeRow): Unit = store.put(layout.storeKey(key), value)
  override def remove(key: UnsafeRow): Unit = store.remove(layout.storeKey(key))
  override def iterator(): Iterator[(UnsafeRow, UnsafeRow)] =
    store.iterator().map(p => (layout.groupingKey(p.key), p.value))
}

case class EmitCacheExec(
    keys: Seq[Attribute],
    intervalMs: Long,
    context: Option[StreamContext],
    child: SparkPlan) extends SluiceStateStoreExec {

  private val layout = new EmitLayout(DataTypeUtils.fromAttributes(keys), DataTypeUtils.fromAttributes(child.output))
  override def keyAttributes: Seq[Attribute] = keys
  override def stateKeySchema: StructType = layout.storeKeySchema
  override def stateValueSchema: StructType = layout.valueSchema
  override def shortName: String = "emitCache"

  override protected def customStatefulOperatorMetrics: Seq[StatefulOperatorCustomMetric] = Seq(
    StatefulOperatorCustomSumMetric("emitCacheForwardedTotal", "rows forwarded downstream by the emission cache"),
    StatefulOperatorCustomSumMetric("emitCacheAbsorbedTotal", "updates replaced in the emission cache unforwarded"),
    StatefulOperatorCustomSumMetric("emitCacheBytes", "bytes held by the emission cache"),
    StatefulOperatorCustomSumMetric("emitCacheEvictTotal", "rows forwarded early because the cache was full"))

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
    // One budget: with the record cache also in use, each cache gets half of the slot's share.
    val withRecordCache = conf.stateStoreProviderClass == classOf[CachingStateStoreProvider].getName

    child.execute().mapPartitionsWithIndex { (partition, iter) =>
      // The aggregation's restore leaves its read store in this thread-local (see
      // StatefulOperatorSupport.mapPartitionsWithStore); its own store is already open by now.
      StateStoreThreadLocalTracker.clearStore()
      val id = StateStoreProviderId(StateStoreId(info.checkpointLocation, info.operatorId, partition), info.queryRunId)
      val store = StateStore.get(id, lay.storeKeySchema, lay.valueSchema, NoPrefixKeyStateEncoderSpec(lay.storeKeySchema),
        info.storeVersion, None, None, useColumnFamilies = false, storeConf, hadoopConf.value.value)
      TaskContext.get().addTaskCompletionListener[Unit](_ => if (!store.hasCommitted) store.abort())
      val keyProj = UnsafeProjection.create(keyExprs, output)
      // This task slot's share (C/T) of the one budget, less what other partitions homed in the
      // same slot hold between their batches (one cache per slot, as one per Kafka stream thread).
      val slotShare = CachingStateStoreProvider.sharedSlotBytes(MemoryBudget.cacheBytesPerSlot, withRecordCache)
      val share = SlotCaches.emitShare(id, slotShare, {
        // partitions of this query run are live; only others' need the (locked) provider lookup
        case other: StateStoreProviderId => other.queryRunId == id.queryRunId || EmitCacheExec.isActive(other)
        case _ => false
      })
      val cache = new EmissionCache(lay, new UnsafeStoreAdapter(store, lay), share, interval, batchMs, batchId)
      val out = new ArrayBuffer[InternalRow]
      val emit: InternalRow => Unit = r => out += r
      iter.foreach(row => cache.update(keyProj(row).copy(), row, emit))
      val s = cache.finish(emit)
      longMetric("commitTimeMs") += timeTakenMs { store.commit() }
      // The store's provider differs from the query's: report only the provider-independent metrics.
      val storeMetrics = store.metrics
      longMetric("numTotalStateRows") += storeMetrics.numKeys
      longMetric("stateMemory") += storeMetrics.memoryUsedBytes
      longMetric("numOutputRows") += out.size
      longMetric("numUpdatedStateRows") += s.entries
      longMetric("emitCacheForwardedTotal") += s.forwarded
      longMetric("emitCacheAbsorbedTotal") += s.absorbed
      longMetric("emitCacheBytes") += s.bytes
      longMetric("emitCacheEvictTotal") += s.evicted
      if (s.nextDueMs != Long.MaxValue) due.add(s.nextDueMs)
      SlotCaches.emitHeld(id, s.bytes)
      out.iterator
    }
  }

  override protected def withNewChildInternal(newChild: SparkPlan): EmitCacheExec = copy(child = newChild)
}

object EmitCacheExec {
  /** When each partition was last found active; inactive ones are dropped. */
  private val lastFoundActive = new java.util.concurrent.ConcurrentHashMap[StateStoreProviderId, java.lang.Long]()
  private val ActiveCheckTtlMs = 5000L

  /**
   * Whether another query's emission-cache partition still runs on this executor, so that its held
   * rows count against the slot. A stopped query's providers stay loaded until maintenance unloads
   * them, so being loaded is not enough: the coordinator knows the instances of stopped runs are
   * no longer active (it is asked at most every few seconds per partition).
   */
  private[sluice] def isActive(other: StateStoreProviderId): Boolean = {
    val now = System.currentTimeMillis()
    val checkedAt = lastFoundActive.get(other)
    if (checkedAt != null && now - checkedAt < ActiveCheckTtlMs) true
    else {
      val env = SparkEnv.get
      val active = env != null && StateStore.isLoaded(other) && Try(
        StateStoreCoordinatorRef.forExecutor(env)
          .verifyIfInstanceActive(other, env.blockManager.blockManagerId.executorId)).getOrElse(true)
      if (active) lastFoundActive.put(other, now) else lastFoundActive.remove(other)
      active
    }
  }

  /**
   * The emission cache keeps its rows in sluice's in-memory store whatever the query's provider:
   * its state is bounded by the cache's byte share, so memory is the right place, and that store
   * updates its one live map in place and writes only the batch's changes (one small delta file per
   * version). Spark's HDFS-backed store copies its map every version and, in 4.1, writes each
   * delta through a checksum file manager that hands the bytes to another thread pool; that commit
   * cost more than everything else the emission cache does (bench/cache/README.md). The store keys
   * are one binary column (see [[EmitLayout]]), so the window store never treats a windowed
   * grouping key as a window to expire.
   */
  def storeConf(session: SparkSession): StateStoreConf = {
    val conf = session.sessionState.conf.clone()
    conf.setConfString(SQLConf.STATE_STORE_PROVIDER_CLASS.key, classOf[InMemoryWindowStoreProvider].getName)
    // The store versions are plain batch ids (no checkpoint ids), whatever the query's format.
    conf.setConfString(SQLConf.STATE_STORE_CHECKPOINT_FORMAT_VERSION.key, "1")
    new StateStoreConf(conf)
  }
}
