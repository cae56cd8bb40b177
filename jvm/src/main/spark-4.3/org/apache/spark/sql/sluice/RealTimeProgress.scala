package org.apache.spark.sql.sluice

import java.util.concurrent.TimeUnit.NANOSECONDS

import org.apache.spark.TaskContext
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.analysis.WidenStatefulOpNullability
import org.apache.spark.sql.catalyst.expressions.{
  Alias, Attribute, BoundReference, Expression, GenericInternalRow, Literal, MutableProjection,
  NamedExpression, UnsafeProjection, UnsafeRow
}
import org.apache.spark.sql.catalyst.expressions.aggregate.{AggregateExpression, Last}
import org.apache.spark.sql.catalyst.plans.physical.HashPartitioning
import org.apache.spark.sql.catalyst.streaming.InternalOutputModes.Update
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.execution.{SparkPlan, UnaryExecNode}
import org.apache.spark.sql.execution.exchange.ShuffleExchangeExec
import org.apache.spark.sql.execution.streaming.{
  ProjectAggregationBufferExec, ProjectAggregationBufferProcessor, StatefulStreamlineAggregateExec,
  StatefulStreamlineAggregationProcessor
}
import org.apache.spark.sql.execution.streaming.operators.stateful.StatefulOperatorStateInfo
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.streaming.OutputMode
import org.apache.spark.sql.types.{BooleanType, DataType, StructType}
import org.apache.spark.util.CompletionIterator

import org.apache.spark.sql.sluice.ProgressRows.Boundaries

/**
 * The plan of the progress rows ([[ProgressRows]]) of Spark 4.3's real-time aggregation under suppress:
 * Spark's three stages, partial (a buffer per input row) -> shuffle -> merge into state -> final (the
 * results), become
 * {{{
 *   ProgressPassingFinalExec      Spark's final stage; a progress row keeps its window and stream time only
 *   ProgressPassingAggregateExec  Spark's merge stage; a progress row passes untouched
 *   ShuffleExchangeExec           Spark's, unchanged: a progress row goes where its grouping values hash
 *   ProgressSendExec              after Spark's partial stage: the task's rows, and its progress rows
 *   ProjectAggregationBufferExec  Spark's partial stage, unchanged
 * }}}
 * A progress row is made as a buffer row (the partial stage's output), never as an input row: no
 * aggregate function of the query, nor any result expression, is ever evaluated on it (a made-up input
 * row could divide by zero under ANSI mode). Its buffers are null but for the hidden
 * `last(named_struct(upstream, time))` suppress reads its clock from.
 */
object RealTimeProgress {

  /**
   * Where a progress row's values go, found on the driver in the partial stage's output (the same layout
   * through the shuffle and the merge): the window column, the hidden stream-time buffer (its `last`
   * value; its `valueSet` flag follows), the grouping columns, and for each shuffle partition the window
   * offset j whose progress row the shuffle sends there.
   */
  final case class Layout(window: Int, streamTime: Int, grouping: Int, offsets: IndexedSeq[Long])

  /**
   * `agg`'s plan (its parent `fin`, Spark's final stage) with progress rows, or None when the plan is not
   * the one above (a window suppress does not see, a window of Spark's not grouped as a column); then
   * suppress's clock moves with data rows alone, as it did before progress rows.
   */
  def install(fin: ProjectAggregationBufferExec, agg: StatefulStreamlineAggregateExec, window: Attribute,
      streamTime: Attribute, graceMs: Long): Option[SparkPlan] = for {
    exchange <- Some(agg.child).collect { case e: ShuffleExchangeExec => e }
    hash <- Some(exchange.outputPartitioning).collect { case h: HashPartitioning => h }
    partial <- Some(exchange.child).collect { case p: ProjectAggregationBufferExec if !p.isFinalAggregate => p }
    grouping = partial.groupingExpressions.map(_.toAttribute)
    windowAt = grouping.indexWhere(_.exprId == window.exprId)
    if windowAt >= 0
    lastAt <- streamTimeBuffer(fin, partial, streamTime, grouping.size)
    // The merge passes a row through unchanged only if its input and output rows are alike (Spark widens
    // the nullability of its output).
    if agg.output.size == agg.child.output.size && agg.output.zip(agg.child.output).forall { case (o, i) =>
      DataType.equalsStructurally(o.dataType, i.dataType, ignoreNullability = true)
    }
    windowOut = fin.output.indexWhere(_.exprId == window.exprId)
    timeOut = fin.output.indexWhere(_.exprId == streamTime.exprId)
    if windowOut >= 0 && timeOut >= 0
  } yield {
    val offsets = searchOffsets(partial.output, windowAt, grouping.size, hash)
    val layout = Layout(windowAt, lastAt, grouping.size, offsets)
    val send = ProgressSendExec(layout, graceMs * 1000, partial)
    val merge = ProgressPassingAggregateExec.of(agg.copy(child = exchange.withNewChildren(Seq(send))), windowAt)
    ProgressPassingFinalExec.of(fin.copy(child = merge), layout, windowOut, timeOut)
  }

  /**
   * `plan` with progress rows in its first real-time aggregation (top down) that is Spark's final stage
   * over Spark's merge stage, for a suppress whose input has `window` and `streamTime` and whose windows
   * close `graceMs` after their end; `plan` as it is when it has them already or has no such aggregation.
   */
  def install(plan: SparkPlan, window: Option[Attribute], streamTime: Option[Attribute], graceMs: Long): SparkPlan =
    if (window.isEmpty || streamTime.isEmpty || plan.exists(isProgressNode)) plan
    else {
      var done = false
      plan.transformDown {
        case f: ProjectAggregationBufferExec if !done && f.isFinalAggregate =>
          done = true
          f.child match {
            case a: StatefulStreamlineAggregateExec => install(f, a, window.get, streamTime.get, graceMs).getOrElse(f)
            case _ => f
          }
      }
    }

  /** Whether a row of the partial stage's layout, its window at ordinal `window`, is a progress row. */
  private def isProgressRow(row: InternalRow, window: Int): Boolean =
    !row.isNullAt(window) && ProgressRows.isProgress(row.getStruct(window, 2).getLong(1))

  /** Whether `p` is one of the nodes [[install]] adds (sluice's, for Spark's operator allowlist). */
  def isProgressNode(p: SparkPlan): Boolean =
    p.isInstanceOf[ProgressSendExec] || p.isInstanceOf[ProgressPassingAggregateExec] ||
    p.isInstanceOf[ProgressPassingFinalExec]

  /**
   * The ordinal, in `partial`'s output, of the `last` buffer of the hidden stream-time aggregate: the one
   * whose result `fin` outputs as `streamTime` (both stages list their aggregates in the same order).
   */
  private def streamTimeBuffer(fin: ProjectAggregationBufferExec, partial: ProjectAggregationBufferExec,
      streamTime: Attribute, groupingColumns: Int): Option[Int] = {
    val at = fin.resultExpressions.collectFirst {
      case a @ Alias(r: Attribute, _) if a.exprId == streamTime.exprId =>
        fin.aggregateAttributes.indexWhere(_.exprId == r.exprId)
    }.getOrElse(-1)
    if (at < 0 || at >= partial.aggregateExpressions.size || !partial.aggregateExpressions(
        at).aggregateFunction.isInstanceOf[Last]) None
    else {
      val ordinal =
        groupingColumns + partial.aggregateExpressions.take(at).map(_.aggregateFunction.aggBufferAttributes.size).sum
      val types = partial.output.drop(ordinal).take(2).map(_.dataType)
      types match {
        case Seq(s: StructType, BooleanType) if s.size == 2 => Some(ordinal)
        case _ => None
      }
    }
  }

  /**
   * A progress row for window offset `j` in a partial-stage row of `output`: the window [base + j,
   * base + j], non-nullable grouping columns at their type's default, nullable ones and every buffer
   * null; the stream-time buffer (upstream, time) then set by the caller.
   */
  def template(output: Seq[Attribute], window: Int, grouping: Int, j: Long): GenericInternalRow = {
    val row = new GenericInternalRow(output.size)
    for (i <- 0 until grouping if i != window && !output(i).nullable)
      row.update(i, Literal.default(output(i).dataType).value)
    val w = ProgressRows.WindowBaseMicros + j
    row.update(window, InternalRow(w, w))
    row
  }

  /**
   * For each shuffle partition p, the least window offset j whose progress row `hash` sends to p, found
   * with the exchange's own partition expression: about n ln n tries for n partitions, once per plan.
   */
  def searchOffsets(output: Seq[Attribute], window: Int, grouping: Int, hash: HashPartitioning)
      : IndexedSeq[Long] = {
    val n = hash.numPartitions
    val partitionOf = UnsafeProjection.create(Seq(hash.partitionIdExpression), output)
    val offsets = Array.fill(n)(-1L)
    var found = 0
    var j = 0L
    val limit = 1000L * n + 1000
    while (found < n && j < limit) {
      val p = partitionOf(template(output, window, grouping, j)).getInt(0)
      if (offsets(p) < 0) { offsets(p) = j; found += 1 }
      j += 1
    }
    if (found < n) {
      throw new IllegalStateException(
        s"no progress row reaches ${n - found} of the $n shuffle partitions in $limit tries")
    }
    offsets.toIndexedSeq
  }

  /**
   * After Spark's partial stage on each upstream task: the task's rows as they come and, behind the row that
   * starts the task's batch and behind each row that takes the task's largest event time past a window end
   * plus the grace, one progress row per shuffle partition carrying that largest event time.
   */
  case class ProgressSendExec(layout: Layout, graceMicros: Long, child: SparkPlan) extends UnaryExecNode {

    override def output: Seq[Attribute] = child.output
    override def outputPartitioning = child.outputPartitioning
    override protected def stringArgs: Iterator[Any] =
      Iterator(s"${layout.offsets.size} shuffle partitions", s"grace ${graceMicros / 1000} ms")

    override protected def doExecute(): RDD[InternalRow] = {
      val l = layout
      val grace = graceMicros
      val out = output
      child.execute().mapPartitions(rows => new ProgressSender(rows, l, grace, out, TaskContext.getPartitionId()))
    }

    override protected def withNewChildInternal(newChild: SparkPlan): ProgressSendExec = copy(child = newChild)
  }

  /**
   * One upstream task's rows, each progress row due sent right after the row that made it due (before the
   * task reads on: a source that waits for its next record must not hold them).
   */
  private final class ProgressSender(rows: Iterator[InternalRow], layout: Layout, graceMicros: Long,
      output: Seq[Attribute], upstream: Int)
    extends Iterator[InternalRow] {
    private val toUnsafe = UnsafeProjection.create(output.map(_.dataType).toArray)
    private val partitions = layout.offsets.size
    private var max = Long.MinValue
    private var boundaries: Boundaries = null
    // The shuffle partition whose progress row goes next; `partitions` when none is due.
    private var due = partitions

    override def hasNext: Boolean = due < partitions || rows.hasNext

    override def next(): InternalRow =
      if (due < partitions) {
        val row = template(output, layout.window, layout.grouping, layout.offsets(due))
        row.update(layout.streamTime, InternalRow(upstream, max))
        row.update(layout.streamTime + 1, true)
        due += 1
        toUnsafe(row)
      } else {
        val row = rows.next()
        observe(row)
        row
      }

    // The task's first row with an event time, and each row taking its largest past a boundary, make
    // progress rows due.
    private def observe(row: InternalRow): Unit = if (!row.isNullAt(layout.streamTime)) {
      val origin = row.getStruct(layout.streamTime, 2)
      if (!origin.isNullAt(1)) {
        val time = origin.getLong(1)
        if (boundaries == null) {
          val w = row.getStruct(layout.window, 2)
          boundaries = Boundaries.of(w.getLong(0), w.getLong(1), graceMicros)
          max = time
          due = 0
        } else if (time > max) {
          if (boundaries.step(time) > boundaries.step(max)) due = 0
          max = time
        }
      }
    }
  }

  /**
   * Spark's final stage of the real-time aggregation, a progress row turned into an output row that has
   * only its window (output ordinal `windowOut`) and its stream time (`timeOut`, from the hidden buffer)
   * and nulls elsewhere; no result expression is evaluated on it and it is not counted. A subclass, as
   * [[ProgressPassingAggregateExec]] is, for the same reasons.
   */
  class ProgressPassingFinalExec(
      requiredChildDistributionExpressions: Option[Seq[Expression]],
      numShufflePartitions: Option[Int],
      groupingExpressions: Seq[NamedExpression],
      aggregateExpressions: Seq[AggregateExpression],
      aggregateAttributes: Seq[Attribute],
      initialInputBufferOffset: Int,
      resultExpressions: Seq[NamedExpression],
      isFinalAggregate: Boolean,
      child: SparkPlan,
      val layout: Layout,
      val windowOut: Int,
      val timeOut: Int)
    extends ProjectAggregationBufferExec(requiredChildDistributionExpressions, numShufflePartitions,
      groupingExpressions, aggregateExpressions, aggregateAttributes, initialInputBufferOffset, resultExpressions,
      isFinalAggregate, child) {

    override protected def otherCopyArgs: Seq[AnyRef] = Seq(layout, Int.box(windowOut), Int.box(timeOut))

    override def canEqual(that: Any): Boolean = that match {
      case p: ProgressPassingFinalExec => p.layout == layout && p.windowOut == windowOut && p.timeOut == timeOut
      case _ => false
    }

    override def equals(that: Any): Boolean = that match {
      case p: ProgressPassingFinalExec => p.canEqual(this) && super.equals(p)
      case _ => false
    }

    override def hashCode(): Int = 31 * super.hashCode() + layout.hashCode()

    override protected def withNewChildInternal(newChild: SparkPlan): SparkPlan =
      ProgressPassingFinalExec.of(copy(child = newChild), layout, windowOut, timeOut)

    override protected def doExecute(): RDD[InternalRow] = {
      metrics // registered on the driver
      val numOutputRows = longMetric("numOutputRows")
      val in = child.output
      val progressColumns: Seq[Expression] = output.indices.map {
        case i if i == windowOut => BoundReference(layout.window, in(layout.window).dataType, nullable = true)
        case i if i == timeOut => BoundReference(layout.streamTime, in(layout.streamTime).dataType, nullable = true)
        case i => Literal(null, output(i).dataType)
      }
      val window = layout.window
      child.execute().mapPartitionsWithIndex { case (partition, iter) =>
        val processor = new ProjectAggregationBufferProcessor(partition, groupingExpressions, inputAttributes,
          aggregateExpressions, aggregateAttributes, initialInputBufferOffset, resultExpressions,
          (exprs, schema) => MutableProjection.create(exprs, schema))
        val progress = UnsafeProjection.create(progressColumns, in)
        iter.map { row =>
          if (isProgressRow(row, window)) progress(row)
          else {
            numOutputRows += 1
            processor.process(row)
          }
        }
      }
    }
  }

  object ProgressPassingFinalExec {
    def of(f: ProjectAggregationBufferExec, layout: Layout, windowOut: Int, timeOut: Int)
        : ProgressPassingFinalExec =
      new ProgressPassingFinalExec(f.requiredChildDistributionExpressions, f.numShufflePartitions,
        f.groupingExpressions, f.aggregateExpressions, f.aggregateAttributes, f.initialInputBufferOffset,
        f.resultExpressions, f.isFinalAggregate, f.child, layout, windowOut, timeOut)
  }

  /**
   * Spark's real-time streaming aggregation (the update-mode merge stage of
   * `StatefulStreamlineAggregateExec`, Spark 4.3) under suppress(until_window_closes), forwarding the
   * progress rows of [[ProgressRows]] as they came: they reach suppress without a state lookup, a state
   * row or an output row counted. Every other row is aggregated as Spark does, by Spark's own processor,
   * with Spark's state schema, operator name and metrics, so a checkpoint is the same with and without.
   *
   * Eviction is by `eventTimeWatermarkForEviction` alone, at the end of the batch and, when Spark's
   * incremental cleanup is on (`spark.sql.streaming.statefulOperator.incrementalCleanupFactor` > 0),
   * also while rows come: sluice sets it to what every suppress partition had closed before the batch
   * (`RealTimeEviction`), which no row of the batch can reopen. Spark uses the late-events watermark for
   * its incremental cleanup, which is unset here (suppress judges lateness).
   *
   * A subclass, so that everything Spark asks of its stateful operators (progress, state metadata,
   * no-data batches) answers as for Spark's; `withNewChildInternal`, `otherCopyArgs` and `canEqual` keep
   * the subclass through Spark's tree transformations. `window` is the ordinal of the window column in
   * the input rows (a grouping column), where a progress row is told apart.
   */
  class ProgressPassingAggregateExec(
      requiredChildDistributionExpressions: Option[Seq[Expression]],
      numShufflePartitions: Option[Int],
      groupingExpressions: Seq[NamedExpression],
      aggregateExpressions: Seq[AggregateExpression],
      aggregateAttributes: Seq[Attribute],
      initialInputBufferOffset: Int,
      resultExpressions: Seq[NamedExpression],
      isFinalAggregate: Boolean,
      outputMode: Option[OutputMode],
      stateFormatVersion: Int,
      child: SparkPlan,
      stateInfo: Option[StatefulOperatorStateInfo],
      eventTimeWatermarkForLateEvents: Option[Long],
      eventTimeWatermarkForEviction: Option[Long],
      val window: Int)
    extends StatefulStreamlineAggregateExec(requiredChildDistributionExpressions, numShufflePartitions,
      groupingExpressions, aggregateExpressions, aggregateAttributes, initialInputBufferOffset, resultExpressions,
      isFinalAggregate, outputMode, stateFormatVersion, child, stateInfo, eventTimeWatermarkForLateEvents,
      eventTimeWatermarkForEviction) {

    override protected def otherCopyArgs: Seq[AnyRef] = Seq(Int.box(window))

    override def canEqual(that: Any): Boolean = that match {
      case p: ProgressPassingAggregateExec => p.window == window
      case _ => false
    }

    override def equals(that: Any): Boolean = that match {
      case p: ProgressPassingAggregateExec => p.canEqual(this) && super.equals(p)
      case _ => false
    }

    override def hashCode(): Int = 31 * super.hashCode() + window

    override protected def withNewChildInternal(newChild: SparkPlan): SparkPlan =
      ProgressPassingAggregateExec.of(copy(child = newChild), window)

    override protected def doExecute(): RDD[InternalRow] = {
      if (!outputMode.contains(Update)) {
        throw new IllegalStateException(s"sluice forwards progress rows in update mode only, not $outputMode")
      }
      metrics // registered on the driver
      val numOutputRows = longMetric("numOutputRows")
      val numUpdatedStateRows = longMetric("numUpdatedStateRows")
      val allUpdatesTimeMs = longMetric("allUpdatesTimeMs")
      val numRowsReadDuringEviction = longMetric("numRowsReadDuringEviction")
      val numRemovedStateRows = longMetric("numRemovedStateRows")
      val allRemovalsTimeMs = longMetric("allRemovalsTimeMs")
      val commitTimeMs = longMetric("commitTimeMs")
      val numRowsIncrementallyRemoved = longMetric("numRowsIncrementallyRemoved")
      val windowOrdinal = window
      val evictionWm = eventTimeWatermarkForEviction
      val cleanupFactor = conf.getConf(SQLConf.STREAMING_STATE_INCREMENTAL_CLEANUP_FACTOR)
      // As Spark's operator builds its own (its fields are private).
      val keySchema = WidenStatefulOpNullability.widenStateSchema(DataTypeUtils.fromAttributes(keyExpressions))
      val valueSchema = WidenStatefulOpNullability.widenStateSchema(stateManager.getStateValueSchema)

      child.execute().mapPartitionsWithStateStore(getStateInfo, keySchema, valueSchema,
        NoPrefixKeyStateEncoderSpec(keySchema), session.sessionState,
        Some(session.streams.stateStoreCoordinator)) { (store, iter) =>
        val processor = new StatefulStreamlineAggregationProcessor(TaskContext.get().partitionId(),
          groupingExpressions, inputAttributes, aggregateExpressions, aggregateAttributes, initialInputBufferOffset,
          resultExpressions, (exprs, schema) => MutableProjection.create(exprs, schema), stateManager, store,
          numUpdatedStateRows)
        val incremental = if (cleanupFactor > 0) Some(stateManager.evictionIterator(store, evictionWm)) else None
        // The processor's output row is reused: each is consumed before the next is asked for.
        val rows = iter.map { row =>
          if (isProgressRow(row, windowOrdinal)) row
          else {
            var out: UnsafeRow = null
            allUpdatesTimeMs += timeTakenMs { out = processor.process(row) }
            incremental.foreach { evictions =>
              allRemovalsTimeMs += timeTakenMs {
                var removed = 0
                while (removed < cleanupFactor && evictions.hasNext) {
                  evictions.next()
                  removed += 1
                }
              }
            }
            numOutputRows += 1
            out
          }
        }
        CompletionIterator[InternalRow, Iterator[InternalRow]](rows, {
            processor.flushDirtyWrites()
            incremental.foreach(i => numRowsIncrementallyRemoved += i.numRowsRemovedSoFar)
            val evictions = incremental.getOrElse(stateManager.evictionIterator(store, evictionWm))
            val start = System.nanoTime
            while (evictions.hasNext) evictions.next()
            allRemovalsTimeMs += NANOSECONDS.toMillis(System.nanoTime - start)
            numRowsReadDuringEviction += evictions.numRowsReadDuringEvictionSoFar
            numRemovedStateRows += evictions.numRowsRemovedSoFar
            commitTimeMs += timeTakenMs { store.commit() }
            setStoreMetrics(store)
            setOperatorMetrics()
          })
      }
    }
  }

  object ProgressPassingAggregateExec {

    /** `a` forwarding progress rows told apart by the window at input ordinal `window`. */
    def of(a: StatefulStreamlineAggregateExec, window: Int): ProgressPassingAggregateExec =
      new ProgressPassingAggregateExec(a.requiredChildDistributionExpressions, a.numShufflePartitions,
        a.groupingExpressions, a.aggregateExpressions, a.aggregateAttributes, a.initialInputBufferOffset,
        a.resultExpressions, a.isFinalAggregate, a.outputMode, a.stateFormatVersion, a.child, a.stateInfo,
        a.eventTimeWatermarkForLateEvents, a.eventTimeWatermarkForEviction, window)
  }
}
