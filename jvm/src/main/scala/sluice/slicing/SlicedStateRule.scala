package sluice.slicing

import java.nio.charset.StandardCharsets
import java.util.UUID

import org.apache.hadoop.fs.Path

import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.Attribute
import org.apache.spark.sql.catalyst.expressions.aggregate.{DeclarativeAggregate, PartialMerge}
import org.apache.spark.sql.catalyst.plans.physical.HashPartitioning
import org.apache.spark.sql.sluice.StatefulOperatorSupport
import org.apache.spark.sql.streaming.OutputMode

import sluice.conf.SluiceConf
import sluice.spark.PlanTypes.{ColumnarRule, HashAggregateExec, ShuffleExchangeExec, SparkPlan, StateStoreRestoreExec,
  StateStoreSaveExec, StatefulOperatorStateInfo}
import sluice.spark.SwitchedRewrite
import sluice.state.StoreFiles

/**
 * Sliced state (`spark.sluice.window.slicing.state`): a sliding-window aggregation that emits final
 * results keeps its state per slice of event time and key, and forms each window from its slices
 * when the watermark closes it ([[SlicedWindowExec]]), as Flink's slice-shared window aggregation
 * does. Spark keeps one state row per window and key, so each key's slice goes through the shuffle
 * and into the state store once per window it is in (`size / slide` times); sliced, once.
 *
 * What Spark plans, in a micro-batch whose aggregation saves its state in append mode (Spark's append
 * output mode, or suppress(until_window_closes) fused into the aggregation):
 * {{{
 *   save(append) <- merge <- restore <- merge <- exchange(window, keys) <- partial(window, keys) <- Expand(windows)
 * }}}
 * sliced:
 * {{{
 *   SlicedWindowExec <- exchange(keys) <- partial(first window, keys) <- rows
 * }}}
 * The output has the save's columns, so what is above (Spark's final aggregation, or sluice's
 * final projection) is untouched. It applies where window slicing's map side does ([[SlicingRule]]),
 * with declarative aggregate functions (count, sum, avg, min, max, ...) whose buffers Spark's hash
 * aggregation holds, at least one key besides the window, and Spark's state format 2.
 *
 * The state's rows mean something else than Spark's, in the same schema, and are partitioned by the
 * keys alone: the layout is pinned in the checkpoint. A query's first micro-batch with the setting on
 * writes [[MarkerName]] in the operator's state directory before any state; a checkpoint with the
 * marker runs sliced whatever the setting (as Spark keeps a checkpoint's shuffle partitions), and
 * fails if its aggregation can no longer run sliced; one written by Spark's layout keeps it.
 */
private[sluice] object SlicedStateRule extends Logging {
  val MarkerName = "_sluice_sliced_state"

  def rule(session: SparkSession): ColumnarRule =
    SwitchedRewrite.perOperator(SluiceConf.WindowSlicingState.key) {
      case save: StateStoreSaveExec if save.stateInfo.isDefined => planned(session, save)
    }

  private def planned(session: SparkSession, save: StateStoreSaveExec): SparkPlan = {
    val shape = sliced(save)
    if (!layoutIsSliced(session, save.stateInfo.get, shape.left.toOption)) save
    else shape.fold(
      why => throw new IllegalStateException(s"sluice: this query's checkpoint keeps the state of its aggregation " +
        s"(state operator ${save.stateInfo.get.operatorId}) per slice of its sliding windows " +
        s"(${SluiceConf.WindowSlicingState.key} was true when it started), but the aggregation cannot run sliced now: " +
        s"$why. Restore the query as it was, or start it on a new checkpoint."),
      identity)
  }

  /** The sliced plan in place of `save` and what it reads, or why the aggregation is not that shape. */
  private def sliced(save: StateStoreSaveExec): Either[String, SparkPlan] = {
    def fail(why: String) = Left(why)
    if (!save.outputMode.contains(OutputMode.Append())) return fail(s"it saves its state in ${save.outputMode.getOrElse("no")} mode, not append")
    if (save.stateFormatVersion != 2) return fail(s"its state has format ${save.stateFormatVersion}, not 2")
    val (late, evict) = (save.eventTimeWatermarkForLateEvents, save.eventTimeWatermarkForEviction) match {
      case (Some(l), Some(e)) => (l, e)
      case _ => return fail("it has no watermark")
    }
    // save <- merge <- restore <- merge (m1) <- exchange <- partial, over a sliceable map side
    val chain = for {
      m2 <- Some(save.child).collect { case a: HashAggregateExec if merges(a) => a }
      restore <- Some(m2.child).collect { case r: StateStoreRestoreExec => r }
      m1 <- Some(restore.child).collect { case a: HashAggregateExec if merges(a) => a }
      exchange <- Some(m1.child).collect { case x: ShuffleExchangeExec => x }
      partial <- Some(exchange.child).collect { case p: HashAggregateExec => p }
      side <- SlicingRule.sliceable(partial)
    } yield (m1, exchange, partial, side)
    chain match {
      case None => fail("it is not a sliding-window aggregation (window size a multiple of the slide) of hash-aggregated buffers")
      case Some((m1, exchange, partial, side)) =>
        val (windows, window) = (side.windows, side.window)
        val grouping = save.keyExpressions
        val functions = m1.aggregateExpressions.map(_.aggregateFunction)
        val keys = grouping.filterNot(_.exprId == window.exprId)
        if (keys.isEmpty) fail("it groups by the window alone")
        else if (!functions.forall(_.isInstanceOf[DeclarativeAggregate]) || m1.aggregateExpressions.exists(_.filter.isDefined))
          fail("an aggregate function is not declarative or has a filter")
        else if (!sameColumns(grouping, partial.output) || partial.output.size != save.output.size)
          fail("its state key is not the partial aggregation's grouping")
        else {
          val bySlice = SlicingRule.perSlice(partial, side)
          val n = exchange.outputPartitioning.numPartitions
          Right(SlicedWindowExec(save.stateInfo.get, late, evict, grouping, window, windows.shiftsFromFirst,
            windows.windows.indices.map(i => windows.fromFirst(i, window)), functions.map(_.asInstanceOf[DeclarativeAggregate]),
            save.output, exchange.copy(outputPartitioning = HashPartitioning(keys, n), child = bySlice)))
        }
    }
  }

  private def merges(agg: HashAggregateExec): Boolean =
    agg.aggregateExpressions.forall(a => a.mode == PartialMerge && !a.isDistinct)

  private def sameColumns(grouping: Seq[Attribute], partialOutput: Seq[Attribute]): Boolean =
    partialOutput.take(grouping.size).map(_.exprId) == grouping.map(_.exprId)

  /**
   * Per query run and state operator, whether its state is kept per slice: decided when the run
   * first plans it (planning repeats every micro-batch, and what the decision reads is fixed within
   * a run).
   */
  private val decisions = new java.util.WeakHashMap[UUID, java.util.Map[Long, Boolean]]()

  private def layoutIsSliced(session: SparkSession, info: StatefulOperatorStateInfo, notSliceable: Option[String]): Boolean = {
    // Outside the query's own run (`explain()` of a streaming DataFrame plans it with a checkpoint
    // named "<unknown>"): planned as a new checkpoint would be, and nothing is read or written.
    if (!StatefulOperatorSupport.currentStream(session).exists(_.runId == info.queryRunId)) {
      return notSliceable.isEmpty && SluiceConf(session.conf.getAll).get(SluiceConf.WindowSlicingState)
    }
    val ofRun = decisions.synchronized {
      Option(decisions.get(info.queryRunId)).getOrElse {
        val m = new java.util.concurrent.ConcurrentHashMap[Long, Boolean]()
        decisions.put(info.queryRunId, m)
        m
      }
    }
    Option(ofRun.get(info.operatorId)).getOrElse {
      val decided = decide(session, info, notSliceable)
      ofRun.put(info.operatorId, decided)
      decided
    }
  }

  private def decide(session: SparkSession, info: StatefulOperatorStateInfo, notSliceable: Option[String]): Boolean = {
    val dir = new Path(info.checkpointLocation, info.operatorId.toString)
    val hadoopConf = session.sessionState.newHadoopConf()
    val files = StoreFiles(dir, hadoopConf)
    val enabled = SluiceConf(session.conf.getAll).get(SluiceConf.WindowSlicingState)
    val operator = s"state operator ${info.operatorId} of the query at ${new Path(info.checkpointLocation).getParent}"
    if (files.exists(MarkerName)) {
      if (!enabled) logInfo(s"The $operator keeps its state per slice, as its checkpoint was started with; " +
        s"${SluiceConf.WindowSlicingState.key}=false applies to new checkpoints")
      true
    } else if (!enabled) false
    else if (notSliceable.isDefined) {
      logInfo(s"The $operator keeps Spark's state layout: ${notSliceable.get}")
      false
    }
    else if (hasState(dir, files, hadoopConf)) {
      logInfo(s"The $operator keeps Spark's state layout, as its checkpoint was started with; " +
        s"${SluiceConf.WindowSlicingState.key}=true applies to new checkpoints")
      false
    } else {
      files.mkdirs()
      files.write(MarkerName)(_.write(s"the state of operator ${info.operatorId} is kept per slice of its sliding windows\n"
        .getBytes(StandardCharsets.UTF_8)))
      logInfo(s"The $operator keeps its state per slice of its sliding windows")
      true
    }
  }

  /**
   * Whether a store of the operator has written state: a file in a partition directory (named by its
   * number) other than Spark's schema (`_metadata`, written when the first batch is planned).
   */
  private def hasState(dir: Path, files: StoreFiles, hadoopConf: org.apache.hadoop.conf.Configuration): Boolean =
    files.list().filter(n => n.nonEmpty && n.forall(_.isDigit)).exists { partition =>
      StoreFiles(new Path(dir, partition), hadoopConf).list().exists(n => !n.startsWith("_") && !n.startsWith("."))
    }
}
