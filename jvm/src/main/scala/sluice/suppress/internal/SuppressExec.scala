package sluice.suppress.internal

import org.apache.spark.TaskContext
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.sluice.{
  CombinedCustomMetric, CombinedMetric, MinMetric, ProgressRows, SizeOperatorMetric, SluiceStateStoreExec,
  StatefulOperatorSupport, StreamContext
}
import org.apache.spark.sql.types.StructType

import sluice.spark.PlanTypes.SparkPlan
import sluice.spark.PlanTypes.{StatefulOperatorCustomMetric, StatefulOperatorCustomSumMetric, StatefulOperatorStateInfo}
import sluice.spark.StateStoreTypes._
import sluice.state.{KeyedRows, SideStore}
import sluice.suppress._

/**
 * The buffer indexes of one task's stores, from [[BufferIndexCache]] (keyed by the store's
 * provider id) when it holds the version opened, else rebuilt by one scan of the store.
 */
private[sluice] final class SuppressIndexes(runId: java.util.UUID, layout: BufferLayout) {
  var rebuilt = 0L

  private def key(store: StateStore): StateStoreProviderId = StateStoreProviderId(store.id, runId)

  def open(store: StateStore, checkpointId: Option[String]): IndexedStore = {
    BufferIndexCache.retainLoaded()
    val buffer = KeyedRows.of(store)
    val index = BufferIndexCache.take(key(store), store.version, checkpointId).getOrElse {
      rebuilt += 1
      IndexedStore.scan(layout, buffer)
    }
    new IndexedStore(buffer, index)
  }

  def committed(store: StateStore, version: Long, checkpointId: Option[String], index: BufferIndex): Unit =
    BufferIndexCache.offer(key(store), version, checkpointId, index)
}

private[sluice] case class SuppressExec(
    suppressed: Suppressed,
    keys: Seq[Attribute],
    window: Option[Attribute],
    graceMs: Long,
    time: Option[Expression],
    context: Option[StreamContext],
    child: SparkPlan,
    streamTime: Option[Attribute] = None,
    realTime: Boolean = false,
    retracted: Option[Attribute] = None,
    earlyMs: Long = 0L,
    lateRecord: Option[Attribute] = None)
  extends SluiceStateStoreExec {

  private val layout = new BufferLayout(DataTypeUtils.fromAttributes(keys), DataTypeUtils.fromAttributes(child.output))
  override def keyAttributes: Seq[Attribute] = keys
  override def stateKeySchema: StructType = layout.keySchema
  override def stateValueSchema: StructType = layout.valueSchema
  override def shortName: String = SuppressStateLayout.OperatorName
  override protected def nextDueName: String = "suppress next buffer time"

  private def operatorName: String =
    suppressed.name.getOrElse(s"suppress#${context.map(_.stateInfo.operatorId).getOrElse("?")}")

  override protected def customStatefulOperatorMetrics: Seq[StatefulOperatorCustomMetric] = SuppressExec.Metrics

  /** Under the real-time trigger: the least closing time over the partitions after a batch. */
  @transient private lazy val closingTimes: MinMetric =
    MinMetric.registered(sparkContext, "suppress least closing time")

  // `next` is the earliest buffer time left.
  override protected def dueWithoutInput(next: Long, newInputWatermark: Long): Boolean = suppressed match {
    case _: UntilWindowCloses => next <= SuppressExec.closeTime(newInputWatermark, earlyMs)
    // The query's clock, which stamps the batches the limit is judged by.
    case w: UntilWallClockTimeLimit => next + w.limitMs <= queryClockMs
    case _: UntilTimeLimit => false // stream time advances only with input
  }

  override protected def doExecute(): RDD[InternalRow] = {
    val ctx = startBatch("suppress runs only inside a streaming query (writeStream...start())")
    // Late records kept below, and sessions a grace closed in their save: counted as this operator's
    // late drops (before its child runs).
    val lateCounters = Seq(longMetric("lateRecordDropTotal"), longMetric("numRowsDroppedByWatermark"))
    child.foreach {
      case l: LateDropsCounted => l.countInto(lateCounters)
      case _ =>
    }
    val nextTime = nextDue
    val evictWm = ctx.evictionWatermarkMs
    val lateWm = ctx.lateEventsWatermarkMs
    val now = ctx.batchTimestampMs
    val mode = suppressed
    val config = mode.buffer
    val name = operatorName
    val grace = graceMs
    val early = earlyMs
    // Windows ending at or before `closeWm` close in this batch; those ending at or before `lateCloseWm`
    // closed in an earlier one (its closing time, from the previous batch's watermark in the offset log).
    val closeWm = SuppressExec.closeTime(evictWm, early)
    val lateCloseWm = SuppressExec.closeTime(lateWm, early)
    val lay = layout
    val output = child.output
    val keyExprs = keys
    val windowOrdinal = window.map(w => output.indexWhere(_.exprId == w.exprId))
    val timeExpr = time
    val streamTimeOrdinal = streamTime.map(a => output.indexWhere(_.exprId == a.exprId))
    val perRow = realTime
    val retractedOrdinal = retracted.map(a => output.indexWhere(_.exprId == a.exprId))
    val spill = if (config.whenFull == BufferFullStrategy.SpillToDisk) Some(spillStore(ctx)) else None
    // Real time, late records kept: the record of each row dropped as late (see RealTimeSuppress).
    val keep = for {
      attr <- lateRecord
      late <- LateRecordsExec.of(mode)
    } yield {
      val fields = attr.dataType.asInstanceOf[org.apache.spark.sql.types.StructType]
      val columns = DataTypeUtils.toAttributes(fields)
      val writer = LateRecordsExec.writer(session, late, columns, ctx)
      val dir = new org.apache.hadoop.fs.Path(late.path, s"${LateRecords.BatchColumn}=${ctx.batchId}")
      val prefix = s"part-op${ctx.stateInfo.operatorId}-"
      writer.removeWritten(dir, prefix) // an earlier attempt of this batch, if any
      (writer, dir.toString, prefix + "suppress-", output.indexWhere(_.exprId == attr.exprId), fields.size)
    }

    // Real time: each partition's closing time after the batch, for the aggregation's eviction in the next.
    val closing = if (perRow && streamTime.isDefined) Some(RealTimeEviction.startBatch(ctx, closingTimes)) else None

    val checkpointIds = StatefulOperatorStateInfo.enableStateStoreCheckpointIds(conf)
    val loadedIds = ctx.stateInfo.stateStoreCkptIds
    val runId = ctx.stateInfo.queryRunId

    mapPartitionsWithStoreAndUpstreams { upstreams => (store, iter) =>
      val partition = TaskContext.getPartitionId()
      val keyProj = UnsafeProjection.create(keyExprs, output)
      val timeProj = timeExpr.map(e => UnsafeProjection.create(Seq(e), output))
      val disk = spill.map(_.open(partition, lay.keySchema, lay.valueSchema))
      val indexes = new SuppressIndexes(runId, lay)
      val memoryPart = indexes.open(store, loadedIds.map(_(partition).head))
      // The spill store is opened by version alone (see SideStore).
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
      // Under the real-time trigger rows arrive one at a time per partition, in the order of the
      // single upstream channel, for a batch that lasts the checkpoint interval: what is due is
      // released after each row, in the same next() call, then the bound is applied to what is
      // left, and rows are dropped or put on the partition's stream time (see RealTimeSuppress).
      def afterRow(isDue: Long => Boolean): Iterator[InternalRow] =
        buffer.releaseDue(isDue) ++ buffer.enforceBound(isDue)
      val released: Iterator[InternalRow] = mode match {
        case _: UntilWindowCloses if perRow =>
          val ord = windowOrdinal.get
          val tsOrd = streamTimeOrdinal.get
          val closer = new StreamTimeCloser(buffer.storedStreamTime, grace, upstreams)
          val isDue = (t: Long) => closer.isClosed(t)
          val kept = keep.map { case (writer, dir, prefix, ord, fields) =>
            new KeptLateRows(writer, dir, prefix, partition, ord, fields)
          }
          beforeCommit = () => {
            closer.streamTime.foreach(buffer.storeStreamTime)
            kept.foreach(_.commit())
            // What the aggregation below may evict in the next batch (RealTimeEviction).
            closing.foreach(_.add(closer.closeTime))
          }
          // Before the first row: windows the stored stream time closed; after the last, those an idle
          // upstream task no longer holds open (the floor: what the batch's watermark closes, by the
          // micro-batch rule).
          buffer.releaseDue(isDue) ++ iter.flatMap { row =>
            val endMicros = row.getStruct(ord, 2).getLong(1)
            val end = endMicros / 1000
            // (upstream task, event time) of the input row this aggregate row answers: a late row
            // moves its task's clock too
            val origin = row.getStruct(tsOrd, 2)
            def observe(): Unit = if (!origin.isNullAt(1)) closer.observe(origin.getInt(0), origin.getLong(1) / 1000)
            if (ProgressRows.isProgress(endMicros)) {
              // an upstream task's progress: its clock moves, and it is dropped uncounted
              observe()
              afterRow(isDue)
            } else if (closer.isClosed(end)) {
              lateDropped += 1 // its window was closed (and emitted) by this partition's stream time
              kept.foreach(_.keep(row, closer.closeTime - end))
              observe()
              Iterator.empty
            } else {
              lateness(closer.closeTime + grace - end)
              // The buffer's stores copy what they keep (the aggregation's output row is reused).
              buffer.put(keyOf(row), row, end)
              observe()
              afterRow(isDue)
            }
          } ++ { closer.endBatch(closeWm); buffer.releaseDue(isDue) }
        case _: UntilWindowCloses =>
          val ord = windowOrdinal.get
          // Buffer time = window end (ms): due once the batch's closing time reaches it (the watermark,
          // or with a grace below the delay stream time minus the grace: see SuppressExec.closeTime).
          val isDue = (t: Long) => t <= closeWm
          iter.flatMap { row =>
            val end = row.getStruct(ord, 2).getLong(1) / 1000
            if (retractedOrdinal.exists(row.getBoolean)) {
              // A merged-away session: its final result will never exist, so nothing of it is emitted.
              buffer.drop(keyOf(row))
              Iterator.empty
            } else if (end <= lateCloseWm) {
              // Its window was closed (and emitted) by an earlier batch. With a grace below the delay the
              // aggregation still updates the window until Spark's watermark evicts it: those updates
              // (late rows) end here, counted, and never change the emitted final result.
              lateDropped += 1
              Iterator.empty
            } else {
              lateness(evictWm + grace + early - end)
              buffer.put(keyOf(row), row, end)
              buffer.enforceBound(isDue)
            }
          } ++ buffer.afterPut(isDue)
        case UntilTimeLimit(limit, _, _) =>
          val proj = timeProj.get
          var streamTime = buffer.storedStreamTime.getOrElse(Long.MinValue)
          val isDue = (t: Long) => streamTime != Long.MinValue && t <= streamTime - limit
          beforeCommit = () => if (streamTime != Long.MinValue) buffer.storeStreamTime(streamTime)
          val rows = iter.flatMap { row =>
            val tr = proj(row)
            val t = if (tr.isNullAt(0)) streamTime else tr.getLong(0) / 1000
            if (streamTime != Long.MinValue) lateness(streamTime - t)
            streamTime = math.max(streamTime, t)
            buffer.put(keyOf(row), row, t)
            // Real time: released as each row moves the partition's stream time (Kafka Streams'
            // behaviour); micro-batch: only the bound here, the release by the batch's final stream time.
            if (perRow) afterRow(isDue) else buffer.enforceBound(isDue)
          }
          if (perRow) rows else rows ++ buffer.afterPut(isDue)
        case UntilWallClockTimeLimit(limit, _, _) if perRow =>
          // The task's clock, read per row: a real-time batch's timestamp is its start, which would
          // hold every row for the checkpoint interval. A partition that gets no input releases its
          // due rows with the next row or when the batch ends, whichever comes first. On a rerun
          // after a failure rows may leave at other moments: Spark's real-time sink is at least
          // once anyway, and a row is released with its latest value either way.
          val isDue = (t: Long) => t + limit <= System.currentTimeMillis()
          buffer.releaseDue(isDue) ++ iter.flatMap { row =>
            buffer.put(keyOf(row), row, System.currentTimeMillis())
            afterRow(isDue)
          } ++ buffer.releaseDue(isDue)
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
        timedCommit {
          val diskVersion = disk.map(_.commit())
          val version = store.commit()
          // Both stores committed: the indexes now reflect the versions just created.
          diskPart.foreach(p => indexes.committed(disk.get, diskVersion.get, None, p.index))
          val id = if (checkpointIds) store.getStateStoreCheckpointInfo().stateStoreCkptId else None
          indexes.committed(store, version, id, memoryPart.index)
        }
        reportStoreMetrics(store)
        addRows(output = emitted, updated = s.buffered)
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

      StatefulOperatorSupport.onCompletion(released.map { r => emitted += 1; r })(complete())
    }
  }

  /**
   * A bounded buffer's choices (which rows to evict or spill, whether it is full) depend on the
   * order its rows arrive in, and a shuffle's output order is not fixed across attempts: such a
   * buffer gets its rows sorted (by time then keys), so a replayed batch decides the same. Not
   * under the real-time trigger: a sort would hold the batch's rows until it ends; there rows
   * arrive in the order of their one upstream channel and the bound is applied per row.
   */
  override def requiredChildOrdering: Seq[Seq[SortOrder]] =
    if (suppressed.buffer.isBounded && !realTime) Seq((time.toSeq ++ keys).map(SortOrder(_, Ascending)))
    else Seq(Nil)

  /** The spill store: a RocksDB state store (local disk, checkpointed) beside the operator's own. */
  private def spillStore(ctx: StreamContext): SideStore =
    SideStore.beside(session, ctx.stateInfo, SuppressStateLayout.SpillStoreName, SuppressStateLayout.SpillProviderClass,
      StatefulOperatorSupport.runHadoopConf(session, ctx.stateInfo.queryRunId))

  override protected def withNewChildInternal(newChild: SparkPlan): SuppressExec = copy(child = newChild)
}

/**
 * One real-time suppress partition's late records: the record each late row carries (its hidden
 * record column), written with how late it was to the partition's file of the batch, put in place
 * when the partition's batch commits.
 */
private final class KeptLateRows(writer: org.apache.spark.sql.sluice.BatchFiles.Writer, dir: String, prefix: String,
    partition: Int, ordinal: Int, fields: Int) {
  private var file: Option[org.apache.spark.sql.sluice.BatchFiles.File] = None
  private val lateBy = new GenericInternalRow(1)
  private val joined = new JoinedRow()

  def keep(row: InternalRow, lateByMs: Long): Unit = {
    lateBy.setLong(0, lateByMs)
    val f = file.getOrElse { val opened = writer.open(dir, prefix, partition); file = Some(opened); opened }
    f.write(joined(row.getStruct(ordinal, fields), lateBy))
  }

  def commit(): Unit = file.foreach(_.commit())
}

private[sluice] object SuppressExec {

  /**
   * The closing time of a micro-batch whose watermark is `wm`: windows ending at or before it are
   * closed (final result emitted in this batch, rows for them afterwards late). `earlyMs` is the
   * watermark delay minus the window's grace period.
   *
   * Without a grace of its own (`earlyMs` 0) it is the watermark. With one, it is Kafka Streams'
   * stream time minus the grace (KIP-328), stream time being the largest event time seen. Spark's
   * WatermarkTracker, after each batch, sets each `withWatermark` operator's watermark to the largest
   * event time its EventTimeWatermarkExec has seen in any batch so far minus its delay (never moving
   * back), and the global watermark to their minimum (the default policy), starting at 0 and never
   * moving back either; batch N's watermark is written to the offset log before it runs. So for the
   * watermark that feeds the aggregation, batch N's watermark + the delay is the largest event time
   * of the batches before N, the same when the batch replays; a watermark of 0 tells nothing (the
   * largest event time may be below the delay), and then the watermark itself is the closing time.
   * With several watermarks (a join, a union) feeding the query, the global one is their minimum and
   * watermark + delay is at most the largest event time: windows then close late, never early.
   * The result is never below the watermark, so a window closes no later than without the grace, and
   * before Spark evicts its state.
   */
  def closeTime(wm: Long, earlyMs: Long): Long = if (earlyMs > 0 && wm > 0) wm + earlyMs else wm

  /** The operator's metrics, typed by what they count (rows as counts, bytes as sizes). */
  val Metrics: Seq[StatefulOperatorCustomMetric] = Seq(
    StatefulOperatorCustomSumMetric("suppressionEmitTotal", "rows emitted by suppress when due"),
    StatefulOperatorCustomSumMetric("intermediateResultSuppressionTotal", "updates absorbed by suppress"),
    StatefulOperatorCustomSumMetric("suppressionBufferRecords", "rows in the suppress buffers (in memory)"),
    SizeOperatorMetric("suppressionBufferBytes", "bytes in the suppress buffers (in memory)"),
    CombinedCustomMetric("suppressionBufferBytesMax", "largest suppress buffer (bytes, one partition)", "max"),
    StatefulOperatorCustomSumMetric("suppressionEvictTotal", "rows emitted early because a buffer was full"),
    SizeOperatorMetric("suppressionDiskBufferBytes", "bytes of suppress buffers spilled to disk"),
    StatefulOperatorCustomSumMetric("suppressionIndexRebuildTotal",
      "suppress buffer indexes rebuilt by a full store scan (when a store is loaded)"),
    CombinedCustomMetric("recordLatenessMaxMs", "largest lateness of a row reaching suppress", "max"),
    CombinedCustomMetric("recordLatenessAvgMs", "average lateness of rows reaching suppress", "avg"),
    StatefulOperatorCustomSumMetric("lateRecordDropTotal", "rows dropped by suppress as late"))
}
