package sluice.cache.internal

import scala.util.Try

import org.apache.hadoop.fs.Path

import org.apache.spark.rdd.RDD
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Attribute, UnsafeProjection}
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.types.StructType

import org.apache.spark.sql.sluice.{SizeOperatorMetric, SluiceStateStoreExec, StatefulOperatorSupport, StreamContext}

import sluice.conf.MemoryBudget
import sluice.spark.PlanTypes.SparkPlan
import sluice.spark.PlanTypes.{StatefulOperatorCustomMetric, StatefulOperatorCustomSumMetric}
import sluice.spark.StateStoreTypes.{StateStoreId, StateStoreThreadLocalTracker}
import sluice.state.{FileFormats, KeyedRows, SideStore}
import sluice.windowstore.InMemoryWindowStoreProvider

private[sluice] case class EmitCacheExec(
    keys: Seq[Attribute],
    intervalMs: Long,
    context: Option[StreamContext],
    child: SparkPlan,
    realTime: Boolean = false)
  extends SluiceStateStoreExec {

  private val layout =
    new EmitCacheLayout(DataTypeUtils.fromAttributes(keys), DataTypeUtils.fromAttributes(child.output))
  override def keyAttributes: Seq[Attribute] = keys
  override def stateKeySchema: StructType = layout.storeKeySchema
  override def stateValueSchema: StructType = layout.valueSchema
  override def shortName: String = EmitCacheStateLayout.OperatorName
  override protected def nextDueName: String = "emission cache next flush time"

  override protected def customStatefulOperatorMetrics: Seq[StatefulOperatorCustomMetric] = EmitCacheExec.Metrics

  // A partition holds rows whose interval has elapsed by the query's clock (the one its batches
  // are stamped with, which EmitCache judges the interval by).
  override protected def dueWithoutInput(next: Long, newInputWatermark: Long): Boolean =
    next <= queryClockMs

  override protected def doExecute(): RDD[InternalRow] = {
    val ctx = startBatch("the emission cache runs only inside a streaming query")
    val due = nextDue
    val batchMs = ctx.batchTimestampMs
    val batchId = ctx.batchId
    val interval = intervalMs
    val lay = layout
    val output = child.output
    val keyExprs = keys
    val info = ctx.stateInfo
    val hadoopConf = StatefulOperatorSupport.runHadoopConf(session, info.queryRunId)
    val side =
      SideStore.beside(session, info, StateStoreId.DEFAULT_STORE_NAME, EmitCacheStateLayout.ProviderClass, hadoopConf)
    val bothCaches = MemoryBudget.bothCaches(conf.stateStoreProviderClass, intervalMs)
    val firstVersion = EmitCacheExec.firstVersion(session, info.checkpointLocation, info.operatorId, info.storeVersion)
    val perRow = realTime

    child.execute().mapPartitionsWithIndex { (partition, iter) =>
      // The aggregation's restore leaves its read store in this thread-local (see
      // SluiceStateStoreExec.mapPartitionsWithStore); its own store is already open by now.
      StateStoreThreadLocalTracker.clearStore()
      val id = side.id(partition)
      firstVersion.foreach(v =>
        InMemoryWindowStoreProvider.startEmpty(id.storeId.storeCheckpointLocation(),
          hadoopConf.value.value, v))
      val store = side.open(partition, lay.storeKeySchema, lay.valueSchema)
      val keyProj = UnsafeProjection.create(keyExprs, output)
      // The executor's own slot count (its conf), not the driver's.
      val share = EmitCacheExec.partitionShare(info.numPartitions, bothCaches)
      EmitCacheIndexCache.retainLoaded()
      val held = KeyedRows.of(store, lay.storeKey, lay.groupingKey)
      val cached = EmitCacheIndexCache.take(id, store.version, None)
      val index = cached.getOrElse(EmitCacheIndex.scan(lay, held))
      val cache = new EmitCache(lay, held, index, share, interval, batchMs, batchId)
      var forwardedRows = 0L
      val out = if (perRow) {
        // Real time: rows leave in the next() call that brought the update that made them due (or
        // when the batch ends), as they would from Kafka Streams' cache, not when the batch ends.
        iter.flatMap(row => cache.updateNow(keyProj(row).copy(), row, System.currentTimeMillis())) ++
          cache.dueAt(System.currentTimeMillis())
      } else {
        iter.foreach(row => cache.update(keyProj(row).copy(), row))
        cache.finish()
      }
      val forwarded = out.map { r => forwardedRows += 1; r }
      // Rows leave as the sink pulls them; the store commits once the last has gone.
      StatefulOperatorSupport.onCompletion(forwarded) {
        val s = cache.stats
        val version = timedCommit(store.commit())
        EmitCacheIndexCache.offer(id, version, None, index)
        if (cached.isEmpty) longMetric("emitCacheIndexRebuildTotal") += 1
        // The store's provider differs from the query's: report only the provider-independent metrics.
        reportCheckpointInfo(store)
        val storeMetrics = store.metrics
        longMetric("numTotalStateRows") += storeMetrics.numKeys
        longMetric("stateMemory") += storeMetrics.memoryUsedBytes
        addRows(output = forwardedRows, updated = s.entries)
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

  /** The operator's metrics, typed by what they count (rows as counts, bytes as sizes). */
  val Metrics: Seq[StatefulOperatorCustomMetric] = Seq[(String, String)](
    "emitCacheForwardedTotal" -> "rows forwarded downstream by the emission cache",
    "emitCacheAbsorbedTotal" -> "updates replaced in the emission cache unforwarded",
    "emitCacheEvictTotal" -> "rows forwarded early because the cache was full",
    "emitCacheIndexRebuildTotal" ->
      "partitions whose emission cache index was rebuilt by a scan of the store (a restart, a replay, a moved partition)"
  ).map { case (name, desc) => StatefulOperatorCustomSumMetric(name, desc) } :+
    SizeOperatorMetric("emitCacheBytes", "bytes held by the emission cache")

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
      try Some(FileFormats.EmitCacheFirstVersion.readText(marker.toString, in.readAllBytes()).trim.toLong)
      finally in.close()
    } else if (version > 0 && !hasStores(fs, dir, session.sessionState.newHadoopConf())) {
      fs.mkdirs(dir)
      val out = fs.create(marker, false)
      try out.write(FileFormats.EmitCacheFirstVersion.textBytes(s"$version\n"))
      finally out.close()
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
}
