package sluice.suppress.internal

import org.apache.hadoop.fs.Path

import org.apache.spark.TaskContext
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.broadcast.Broadcast
import org.apache.spark.sql.catalyst.expressions.{Alias, Attribute, Expression, JoinedRow, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.sluice.{BatchFiles, StatefulOperatorSupport, StreamContext}
import org.apache.spark.sql.types.{LongType, StructField, StructType}
import org.apache.spark.util.SerializableConfiguration

import sluice.spark.PlanTypes.{
  SQLMetric, SQLMetrics, SessionWindowStateStoreRestoreExec, SparkPlan, StateStoreSaveExec, UnaryExecNode
}
import sluice.spark.SparkNodes
import sluice.suppress.{LateRecords, SuppressUsageException}

/**
 * Keeps the late records of an `untilWindowCloses` whose [[LateRecords]] are set: placed on the input
 * of the aggregation below suppress (after the window is assigned, before any partial
 * aggregation), it takes out every (record, window) row whose window had closed before the batch —
 * its end at or before the batch's closing time for late rows, [[SuppressExec.closeTime]] of the
 * late-events watermark, the rule suppress applies to the aggregation's updates — and writes it to
 * the batch's directory under the user's path. Spark's aggregation would drop these rows at the
 * watermark, or with a grace below the delay suppress would drop the update they cause; taken out
 * here, they are written record by record instead, and neither sees them. A hopping window assigns
 * a record to several windows: it is late, and written, once per closed window (as Kafka Streams
 * drops it per window).
 *
 * A session window (`F.session_window`) is the row's own session, `[ts, ts + gap]`, before any
 * merging: Spark's session restore drops a row at the watermark by that window's end, and with a
 * grace the row's session has closed when that end is at or before the closing time, whatever it
 * would have merged with. `hidden` are columns of the input that are not the user's (the session
 * update's retraction flag): left out of the written records.
 *
 * A session window with a grace below the watermark delay (`sessionKeys` set: the grouping keys
 * without the session window, as the session save reads them) is judged as Kafka Streams judges it,
 * by the session a record merges into, which only the session save knows: rows whose own session
 * had closed by the watermark are taken out and written as above (Spark's session restore would drop
 * them); rows whose own session had closed by the grace alone are staged as candidates
 * ([[LateCandidates]]) and go on, and the session save writes those that merged into a closed session.
 *
 * Exactly once: the set of late rows of a batch is fixed by its input and its late-events watermark
 * (in the offset log), so a replayed batch writes the same rows; the driver first removes what an
 * earlier attempt of the batch wrote, and each task writes its file under a hidden name and renames
 * it into place.
 */
private[sluice] case class LateRecordsNode(
    late: LateRecords, window: Attribute, earlyMs: Long, context: StreamContext, child: LogicalPlan,
    hidden: Seq[Attribute] = Nil, sessionKeys: Seq[Expression] = Nil)
  extends UnaryNode {
  override def output: Seq[Attribute] = child.output
  override protected def withNewChildInternal(newChild: LogicalPlan): LateRecordsNode = copy(child = newChild)
}

private[sluice] case class LateRecordsExec(
    late: LateRecords, window: Attribute, earlyMs: Long, context: StreamContext, child: SparkPlan,
    hidden: Seq[Attribute] = Nil, sessionKeys: Seq[Expression] = Nil)
  extends UnaryExecNode with LateDropsCounted {
  override def output: Seq[Attribute] = child.output
  override def outputPartitioning = child.outputPartitioning

  override lazy val metrics: Map[String, SQLMetric] =
    Map("numLateRecords" -> SQLMetrics.createMetric(sparkContext, "number of late records kept"))

  // The late-drop metrics (LateDropsCounted) are the state operator's the query's progress reports for
  // these records: handed over by SuppressExec on the buffered plan, by LateRecordsCounted on the fused
  // one. The records taken out here are the ones that operator would have dropped.

  /** Whether the session save decides which of the rows taken here are late (see the class comment). */
  def stagesSessions: Boolean = sessionKeys.nonEmpty && earlyMs > 0

  private def written: Seq[Attribute] = child.output.filterNot(a => hidden.exists(_.exprId == a.exprId))
  private def batchDir: Path = new Path(late.path, s"${LateRecords.BatchColumn}=${context.batchId}")
  private def prefix: String = s"part-op${context.stateInfo.operatorId}-"

  /** What the session save needs, on the driver, to write the staged records it finds late. */
  def sessionStage(): SessionLateStage = {
    val cols = written
    SessionLateStage(LateRecordsExec.broadcastConf(session, late), late.path, context.stateInfo.operatorId,
      context.batchId, sessionKeys.size, cols.size,
      SuppressExec.closeTime(context.lateEventsWatermarkMs, earlyMs),
      LateRecordsExec.writer(session, late, cols, context), batchDir.toString, prefix + "sessions-")
  }

  override protected def doExecute(): RDD[InternalRow] = {
    val lateWm = context.lateEventsWatermarkMs
    val closeWm = SuppressExec.closeTime(lateWm, earlyMs)
    val input = child.output
    val written = this.written
    val writer = LateRecordsExec.writer(session, late, written, context)
    val dir = batchDir
    writer.removeWritten(dir, prefix) // an earlier attempt of this batch, if any
    val dirName = dir.toString
    val counters = longMetric("numLateRecords") +: lateDropCounters
    val ord = input.indexWhere(_.exprId == window.exprId)
    val projected = written.size != input.size
    // Sessions judged by the grace: rows closed by it alone are staged, not taken (see the class comment).
    val staging = if (!stagesSessions) None
    else {
      val conf = LateRecordsExec.broadcastConf(session, late)
      LateCandidates.prepare(conf.value.value, new Path(late.path), context.stateInfo.operatorId, context.batchId)
      Some((conf, LateCandidates.batchDir(new Path(late.path), context.stateInfo.operatorId, context.batchId)))
    }
    val keyExprs = sessionKeys.map(k =>
      StatefulOperatorSupport.normalizedGroupingKey(k match {
        case n: org.apache.spark.sql.catalyst.expressions.NamedExpression => n
        case other => Alias(other, "key")()
      }))
    child.execute().mapPartitions(iter => {
        val partition = TaskContext.getPartitionId()
        val project: InternalRow => InternalRow =
          if (projected) UnsafeProjection.create(written, input) else identity
        var file: Option[BatchFiles.File] = None
        var kept = 0L
        val lateBy = new org.apache.spark.sql.catalyst.expressions.GenericInternalRow(1)
        val joined = new JoinedRow()
        val stage = staging.map { case (conf, stageDir) =>
          val keyOf = UnsafeProjection.create(keyExprs, input)
          val record = UnsafeProjection.create(written, input)
          var out: Option[LateCandidates.Writer] = None
          ((row: InternalRow) => {
              val w = row.getStruct(ord, 2)
              out.getOrElse {
                val tc = TaskContext.get()
                val o = new LateCandidates.Writer(conf.value.value, stageDir, partition, tc.taskAttemptId())
                tc.addTaskFailureListener((_, _) => o.abort())
                out = Some(o)
                o
              }.write(keyOf(row), w.getLong(0), w.getLong(1), record(row))
            }, () => out.foreach(_.commit()))
        }
        val rest = iter.filter { row =>
          val end = row.getStruct(ord, 2).getLong(1) / 1000
          if (end > closeWm) true
          else if (stage.isDefined && end > lateWm) {
            stage.get._1(row)
            true
          } else {
            lateBy.setLong(0, closeWm - end)
            file.getOrElse { val f = writer.open(dirName, prefix, partition); file = Some(f); f }.write(joined(
                project(row), lateBy))
            kept += 1
            false
          }
        }
        StatefulOperatorSupport.onCompletion(rest) {
          file.foreach(_.commit())
          stage.foreach(_._2())
          counters.foreach(_ += kept)
        }
      }, preservesPartitioning = true)
  }

  override protected def withNewChildInternal(newChild: SparkPlan): LateRecordsExec = copy(child = newChild)
}

/**
 * The top of a fused final-results plan that keeps its late records: before its child runs (on the
 * driver) it hands the `numRowsDroppedByWatermark` the query's progress reports for the
 * aggregation to the [[LateRecordsExec]] below, so that the records it keeps count as the late drops
 * they replace: the state save's for a time window, the session restore's for a session window
 * (Spark's session save reports its restore's drops). Rows pass through.
 */
private[sluice] case class LateRecordsCounted(child: SparkPlan) extends UnaryExecNode {
  override def output: Seq[Attribute] = child.output
  override def outputPartitioning = child.outputPartitioning
  override def outputOrdering = child.outputOrdering

  override protected def doExecute(): RDD[InternalRow] = {
    val dropped = child.collectFirst {
      case s: StateStoreSaveExec => s.longMetric("numRowsDroppedByWatermark")
      case r: SessionWindowStateStoreRestoreExec => r.longMetric("numRowsDroppedByWatermark")
    }
    child.foreach {
      case l: LateRecordsExec => l.countInto(dropped.toSeq)
      case _ =>
    }
    child.execute()
  }

  override protected def withNewChildInternal(newChild: SparkPlan): LateRecordsCounted = copy(child = newChild)
}

private[sluice] object LateRecordsExec {

  /**
   * Per query run, per operator: the writer prepared by the run's first batch, shared by whatever
   * writes the operator's late records (the aggregation's input, the session save, real-time suppress),
   * which all write the same columns.
   */
  private val writers = new java.util.WeakHashMap[java.util.UUID, java.util.Map[Long, BatchFiles.Writer]]()

  def writer(session: org.apache.spark.sql.SparkSession, late: LateRecords, input: Seq[Attribute],
      ctx: StreamContext): BatchFiles.Writer = writers.synchronized {
    val ofRun = writers.computeIfAbsent(ctx.stateInfo.queryRunId, _ => new java.util.HashMap[Long, BatchFiles.Writer]())
    ofRun.computeIfAbsent(ctx.stateInfo.operatorId,
      _ => {
        val format =
          BatchFiles.fileFormat(session, late.format).fold(e => throw new SuppressUsageException(e), identity)
        val records = schema(input)
        // The records' columns beside them, before the run's first batch writes any (see LateRecordsSchema).
        LateRecordsSchema.write(BatchFiles.hadoopConf(session, late.options), late, records,
          new Path(ctx.stateInfo.checkpointLocation).getParent)
        BatchFiles.prepare(session, format, late.options, records, new Path(late.path))
      })
  }

  /** The Hadoop configuration for `late`'s files, for the tasks. */
  def broadcastConf(session: org.apache.spark.sql.SparkSession, late: LateRecords)
      : Broadcast[SerializableConfiguration] =
    session.sparkContext.broadcast(new SerializableConfiguration(BatchFiles.hadoopConf(session, late.options)))

  /** Where `s` keeps its late records, if it does. */
  def of(s: sluice.suppress.Suppressed): Option[LateRecords] = s match {
    case u: sluice.suppress.UntilWindowCloses => u.lateRecords
    case _ => None
  }

  /** The columns of a kept record: the aggregation's input columns and how late it came. */
  def schema(input: Seq[Attribute]): StructType =
    StructType(DataTypeUtils.fromAttributes(input).fields :+ StructField(LateRecords.LateByColumn, LongType, false))

  /**
   * `child` (suppress's input: the aggregation, perhaps under a projection of its columns) with a
   * [[LateRecordsNode]] on the aggregation's input; fails when it cannot be placed.
   */
  def place(child: LogicalPlan, late: LateRecords, window: Attribute, earlyMs: Long, ctx: StreamContext)
      : LogicalPlan = child match {
    case a: Aggregate => placeOn(a, late, window, earlyMs, ctx)
    case p @ Project(list, a: Aggregate) if list.forall(_.isInstanceOf[Attribute]) =>
      SparkNodes.projectWith(p)(child = placeOn(a, late, window, earlyMs, ctx))
    case _ => refuse("its input is not directly a windowed streaming aggregation")
  }

  /**
   * `agg` with a [[LateRecordsNode]] on its input, which also carries the event-time column when the
   * plan lets it through; fails when the window is not a column of that input.
   */
  def placeOn(agg: Aggregate, late: LateRecords, window: Attribute, earlyMs: Long, ctx: StreamContext): Aggregate =
    SparkNodes.aggregateWith(agg)(child = above(agg.child, late, window, earlyMs, ctx))

  /**
   * A [[LateRecordsNode]] on `input`, an aggregation's input, which also carries the event-time
   * column when the plan lets it through; `hidden` columns of `input` are not written. Fails when
   * the window is not a column of `input`.
   */
  def above(input: LogicalPlan, late: LateRecords, window: Attribute, earlyMs: Long, ctx: StreamContext,
      hidden: Seq[Attribute] = Nil, sessionKeys: Seq[Expression] = Nil): LateRecordsNode = {
    val w = input.output.find(_.exprId == window.exprId).getOrElse(refuse(s"the window column ${window.name} " +
        "is computed inside the aggregation, not on its input (late records are kept for windows assigned by " +
        "F.window or F.session_window)"))
    val eventTime = input.collectFirst { case e: EventTimeWatermark => e.eventTime.exprId }
    val withTime = eventTime.flatMap(keep(input, _)).getOrElse(input)
    LateRecordsNode(late, w, earlyMs, ctx, withTime, hidden, sessionKeys)
  }

  private def refuse(why: String): Nothing =
    throw new SuppressUsageException(s"suppress cannot keep late records: $why.")

  /**
   * `plan` with the attribute `id` in its output, carried up through the projections, filters and
   * expands between the watermark and the aggregation (the optimizer prunes the event-time column
   * there when no aggregate reads it); None when another node is in the way.
   */
  private def keep(plan: LogicalPlan, id: org.apache.spark.sql.catalyst.expressions.ExprId): Option[LogicalPlan] =
    if (plan.output.exists(_.exprId == id)) Some(plan)
    else {
      def in(p: LogicalPlan) = p.output.find(_.exprId == id)
      plan match {
        case p: Project => keep(p.child, id).flatMap(c =>
            in(c).map(a =>
              SparkNodes.projectWith(p)(projectList = p.projectList :+ a, child = c)))
        case f: Filter => keep(f.child, id).map(c => SparkNodes.filterWith(f, c))
        case e: Expand => keep(e.child, id).flatMap(c =>
            in(c).map(a =>
              SparkNodes.expandWith(e, projections = e.projections.map(_ :+ a), output = e.output :+ a, child = c)))
        case _ => None
      }
    }
}

/**
 * What a session save needs to write the late records of the sessions it undoes (see
 * [[LateRecordsExec]] and [[LateCandidates]]): where the batch's candidates are staged and how many
 * columns their keys and records have, the batch's closing time (ms), and the late records' writer.
 */
private[sluice] final case class SessionLateStage(
    conf: Broadcast[SerializableConfiguration], base: String, operatorId: Long, batchId: Long, keyFields: Int,
    recordFields: Int, closeMs: Long, writer: BatchFiles.Writer, dir: String, prefix: String) {
  def candidates(): Map[UnsafeRow, Seq[LateCandidates.Candidate]] =
    LateCandidates.read(conf.value.value, new Path(base), operatorId, batchId, keyFields, recordFields)

  def open(partition: Int): BatchFiles.File = writer.open(dir, prefix, partition)
}
