package sluice.suppress.internal

import org.apache.spark.sql.catalyst.expressions.{
  Alias, Attribute, CreateNamedStruct, Literal, NamedExpression, SparkPartitionID
}
import org.apache.spark.sql.catalyst.expressions.aggregate.Last
import org.apache.spark.sql.catalyst.plans.logical._

import sluice.conf.RealTimeMode
import sluice.spark.SparkNodes
import sluice.suppress._

/**
 * suppress under Spark's real-time trigger (Spark 4.3): what runs, and the plan it runs on.
 *
 * A real-time batch lasts the checkpoint interval and Spark's watermark moves only between
 * batches, so a final result closed by the watermark would wait for the interval. Instead each
 * suppress partition keeps its own stream time: the least, over the upstream tasks feeding it
 * through the shuffle, of the largest event time each has sent (Flink's watermark, the minimum
 * over input channels; with one upstream task it is Kafka Streams' stream time per task). Taking
 * the least is what keeps a task that runs ahead (a backlog drained at different speeds) from
 * closing windows another task still has rows for, and it makes every close decision a function
 * of each upstream task's own row order, not of how the shuffle interleaves them: a rerun decides
 * the same. For that each row must say which upstream task sent it and that row's event time, so
 * the aggregation below suppress gets a hidden `last(named_struct(upstream, event time))` over a
 * hidden `spark_partition_id()` of its input (the aggregation's output row for an input row then
 * carries that row's own), which a projection above suppress drops again.
 *
 * The aggregation below judges no row late and evicts only what every suppress partition has closed
 * ([[RealTimeEviction]]): suppress alone drops late rows, by its partition's clock.
 *
 * Late records kept under the real-time trigger: the aggregation emits one row per input row, so a
 * second hidden `last(named_struct(<the aggregation's input columns>))` carries the record each row
 * answers, and suppress writes the record of each row it drops as late. The record column is state
 * of the aggregation too (one record per window and key).
 *
 * The hidden columns are added only to real-time runs, in the physical planning of each batch: a
 * micro-batch query's plan and state stay exactly as before. The price is that an
 * until_window_closes checkpoint cannot switch between the two triggers, nor keep late records or
 * stop keeping them under the real-time one: the aggregation's state schema differs, and the
 * restart is refused at start ([[hiddenColumns]], recorded in the operator's sidecar).
 */
private[sluice] object RealTimeSuppress {

  /** The hidden column's name: (upstream task, event time) of the row that updated the aggregate. */
  val StreamTimeColumn = "__sluice_ts"

  /** The hidden input column: the upstream task (its partition) each input row comes from. */
  private val UpstreamColumn = "__sluice_upstream"

  /** The hidden column of the record each aggregate row answers, when late records are kept. */
  val RecordColumn = "__sluice_record"

  private def refuse(why: String, instead: String): Nothing =
    throw new SuppressUsageException(RealTimeMode.unsupported("suppress", why, instead))

  /**
   * The hidden columns the aggregation below `n` carries under the real-time trigger, in order: part
   * of its state schema (none in micro-batches).
   */
  def hiddenColumns(n: SuppressNode): Seq[String] = n.suppressed match {
    case _: UntilWindowCloses => StreamTimeColumn +: LateRecordsExec.of(n.suppressed).map(_ => RecordColumn).toSeq
    case _ => Nil
  }

  /** Refuses what suppress does not do in real time, at the batch's planning. */
  def refuseUnsupported(n: SuppressNode): Unit = {
    if (n.suppressed.buffer.whenFull == BufferFullStrategy.SpillToDisk) {
      throw new SuppressUsageException(RealTimeMode.unsupported(
          s"suppress with a spilling buffer (${n.suppressed.buffer})",
          "the spill store is a RocksDB store checkpointed by version number alone, and Spark's real-time mode " +
            "requires state checkpoint ids (a rerun batch could reuse a failed attempt's file names)",
          "Use emit_early_when_full() or shut_down_when_full(), " + RealTimeMode.orUseMicroBatches))
    }
  }

  /**
   * `n`'s child with the hidden stream-time column, and that column; only for until_window_closes,
   * whose windows close by stream time (until_time_limit has its time_col). With late records
   * kept, also the hidden record column: the columns [[hiddenColumns]] names, in its order.
   */
  def withStreamTime(n: SuppressNode): (LogicalPlan, Attribute, Option[Attribute]) = {
    val keepRecords = hiddenColumns(n).contains(RecordColumn)
    val (agg, rebuild) = n.child match {
      case a: Aggregate => (a, (a2: Aggregate, _: Attribute) => a2: LogicalPlan)
      case p @ Project(list, a: Aggregate) if list.forall(_.isInstanceOf[Attribute]) =>
        (a,
          (a2: Aggregate, ts: Attribute) =>
            SparkNodes.projectWith(p)(projectList = list :+ ts, child = a2): LogicalPlan)
      case _ => refuse(
          "its input is not directly a windowed streaming aggregation (each row must carry its " +
            "event time, which suppress adds to the aggregation below it)",
          "Apply suppress directly to the aggregation, " + RealTimeMode.orUseMicroBatches)
    }
    val eventTime = agg.collectFirst { case w: EventTimeWatermark =>
      w.output.find(_.exprId == w.eventTime.exprId).getOrElse(w.eventTime)
    }.getOrElse(refuse("its aggregation has no watermark below it", "Call withWatermark before the aggregation."))
    val input = keepColumn(agg.child, eventTime)
    val upstream = Alias(SparkPartitionID(), UpstreamColumn)()
    val origin = CreateNamedStruct(Seq(Literal("upstream"), upstream.toAttribute, Literal("time"), eventTime))
    val hidden = Alias(Last(origin, ignoreNulls = false).toAggregateExpression(), StreamTimeColumn)()
    val record = if (!keepRecords) None
    else {
      val fields = input.output.flatMap(a => Seq(Literal(a.name), a))
      Some(Alias(Last(CreateNamedStruct(fields), ignoreNulls = false).toAggregateExpression(), RecordColumn)())
    }
    val newAgg = SparkNodes.aggregateWith(agg)(
      aggregateExpressions = agg.aggregateExpressions ++ (hidden +: record.toSeq).map(e => e: NamedExpression),
      child = SparkNodes.project(input.output :+ upstream, input))
    val rebuilt = rebuild(newAgg, hidden.toAttribute) match {
      case p: Project =>
        record.fold(p: LogicalPlan)(r => SparkNodes.projectWith(p)(projectList = p.projectList :+ r.toAttribute))
      case other => other
    }
    (rebuilt, hidden.toAttribute, record.map(_.toAttribute))
  }

  /**
   * `plan` with `col` (an output of the EventTimeWatermark below it) kept up to its top: the
   * optimizer pruned it from the projections the aggregation did not need it from.
   */
  private def keepColumn(plan: LogicalPlan, col: Attribute): LogicalPlan =
    if (plan.outputSet.contains(col)) plan
    else plan match {
      case p: Project => SparkNodes.projectWith(p)(projectList = p.projectList :+ col, child = keepColumn(p.child, col))
      case f: Filter => SparkNodes.filterWith(f, keepColumn(f.child, col))
      case _ => refuse(
          s"the event-time column ${col.name} does not reach the aggregation through " +
            s"${plan.nodeName} (windows planned as ${plan.nodeName} are not supported in real time)",
          "Use a tumbling window, " + RealTimeMode.orUseMicroBatches)
    }
}

/**
 * The close decision of one suppress partition under the real-time trigger: a window closes when
 * its end is at or below stream time minus the grace, where stream time is the least, over the
 * partition's `upstreams` tasks, of the largest event time each has sent (see [[RealTimeSuppress]];
 * none until every task has sent a row), restored with the store as one value for all of them.
 * Kafka Streams' `<=` semantics, as the micro-batch operator.
 *
 * Spark's watermark does not close windows here while rows come: it is the largest event time of
 * any task minus the delay, so while a backlog drains at different speeds it would close windows a
 * slower task still has rows for. It is only the floor of an idle upstream task: one that sent the
 * partition no row in a whole batch no longer holds the partition back once that batch ends
 * ([[endBatch]]), so windows of a partition without input still close, the same on a replay (the
 * floor is the batch's watermark in the offset log, and which tasks sent rows is a function of the
 * batch's input). With progress rows (org.apache.spark.sql.sluice.ProgressRows) a task that read any
 * record sent every partition a row, so idle means a task that read nothing in the batch.
 */
private[sluice] final class StreamTimeCloser(stored: Option[Long], graceMs: Long, upstreams: Int = 1) {
  require(upstreams >= 1, s"a suppress partition has at least one upstream task, not $upstreams")
  private val clocks = Array.fill(upstreams)(stored.getOrElse(Long.MinValue))
  private val sent = new Array[Boolean](upstreams)
  private var stream: Long = clocks.min

  def streamTime: Option[Long] = if (stream == Long.MinValue) None else Some(stream)

  def closeTime: Long = if (stream == Long.MinValue) Long.MinValue else stream - graceMs

  /** Whether the window ending at `windowEndMs` is closed (its final result due, or already out). */
  def isClosed(windowEndMs: Long): Boolean = windowEndMs <= closeTime

  /** Advances upstream task `upstream`'s clock by a row's event time (never back). */
  def observe(upstream: Int, eventTimeMs: Long): Unit = {
    if (upstream < 0 || upstream >= upstreams) {
      throw new IllegalStateException(s"a row from upstream task $upstream, but $upstreams feed this partition")
    }
    sent(upstream) = true
    if (eventTimeMs > clocks(upstream)) {
      val wasLeast = clocks(upstream) == stream
      clocks(upstream) = eventTimeMs
      if (wasLeast) stream = clocks.min
    }
  }

  /**
   * The batch's end: each upstream task that sent no row in it closes no earlier than `floorMs`
   * (the batch watermark's closing time, Long.MinValue for none), its clock raised to match.
   */
  def endBatch(floorMs: Long): Unit = if (floorMs != Long.MinValue) {
    for (u <- 0 until upstreams if !sent(u)) clocks(u) = math.max(clocks(u), floorMs + graceMs)
    stream = clocks.min
  }
}
