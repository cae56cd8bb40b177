package sluice.suppress.internal

import java.util.UUID

import org.apache.hadoop.fs.Path

import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.Attribute
import org.apache.spark.sql.catalyst.plans.logical.{Aggregate, LogicalPlan, Project}
import org.apache.spark.sql.sluice.{StatefulOperatorSupport, StreamContext}
import org.apache.spark.sql.streaming.OutputMode

import sluice.conf.{SluiceConf, SluiceConfException}
import sluice.spark.CheckpointTypes.CheckpointFileManager
import sluice.conf.RealTimeMode
import sluice.spark.PlanTypes.SparkPlan
import sluice.spark.PlanTypes.{StateStoreRestoreExec, StateStoreSaveExec}
import sluice.spark.SparkNodes
import sluice.state.FileFormats
import sluice.suppress.{LateRecords, SuppressUsageException, UntilWindowCloses}

/**
 * Fused final results: `untilWindowCloses` with an unbounded buffer directly above a windowed
 * streaming aggregation runs as that aggregation alone, with Spark's append-mode state save: the
 * aggregation emits each window once, when the watermark passes its end, and drops it from its
 * state then. The query stays in update mode, and no suppress buffer keeps a second copy of the
 * open windows (Kafka Streams' `emitStrategy(onWindowClose())`, KIP-825, does the same).
 *
 * It applies when the aggregation is the query's only Spark stateful operator: Spark numbers its
 * operators from 0 in plan order, so the aggregation's id is 0 whether or not it is fused. The
 * aggregation is planned with Spark's own strategy, and its state restore and save operators get
 * their state info (operator 0, built as Spark builds it) and output mode Append here.
 * IncrementalExecution's StateOpIdRule fills only operators without state info, so it leaves them
 * alone, while its watermark propagation, state metadata and no-data-batch logic treat them as
 * any aggregation's. Output equals the unfused operator's: both emit a window in the batch whose
 * eviction watermark reaches its end, and both drop rows of windows the previous watermark closed.
 *
 * Checkpoints: the fused plan has one stateful operator (0), the unfused one two (0 and the
 * suppress operator's), and Spark refuses a restart whose operators differ from the checkpoint's.
 * So a checkpoint with suppress state keeps the unfused plan; a fused checkpoint is marked
 * ([[MarkerName]] in operator 0's state directory) so that a restart that would run it unfused fails
 * with a message saying why: the fused state has no buffer to hand over, and the open windows'
 * final results would be lost.
 */
private[sluice] object FusedFinal extends Logging {
  val MarkerName = "_sluice_fused_final"

  /** Spark's id of the aggregation: its only stateful operator. */
  private val AggregationId = 0L

  /**
   * Per query run and suppress operator id, whether it is fused: decided when the run first plans
   * it (planning repeats every micro-batch, and nothing the decision reads changes within a run).
   */
  private val decisions = new java.util.WeakHashMap[UUID, java.util.Map[Long, Boolean]]()

  /**
   * The fused physical plan of `node`, or None when `node` runs as the suppress operator. Throws
   * when the checkpoint was written fused but `node` would now run unfused.
   */
  def plan(session: SparkSession, node: SuppressNode, ctx: Option[StreamContext]): Option[SparkPlan] =
    ctx.flatMap { c =>
      val exec = c.execution
      val shape = fusable(node, exec.optimizedPlan)
      val id = c.stateInfo.operatorId
      val ofRun = decisions.synchronized {
        Option(decisions.get(exec.runId)).getOrElse {
          val m = new java.util.concurrent.ConcurrentHashMap[Long, Boolean]()
          decisions.put(exec.runId, m)
          m
        }
      }
      val fuse = Option(ofRun.get(id)).getOrElse {
        val decided = decide(session, shape, c)
        ofRun.put(id, decided)
        decided
      }
      if (!fuse) None
      else shape.toOption.flatMap { case (project, agg) =>
        val late = LateRecordsExec.of(node.suppressed)
        val fused = planFused(late.fold(agg)(withLateRecords(node, agg, _, c)), c).map { p =>
          if (late.isDefined) LateRecordsCounted(p) else p
        }
        if (fused.isEmpty) {
          throw new IllegalStateException(s"sluice: Spark's streaming aggregation strategy did not plan " +
            s"${agg.simpleString(200)} with one state save; cannot fuse suppress into it")
        }
        fused.map(p => project.fold(p)(pr => SparkNodes.projectExec(pr.projectList, p)))
      }
    }

  /** The Project (if any) and the aggregation `node` would fuse into, or why it cannot. */
  private def fusable(node: SuppressNode, root: LogicalPlan): Either[String, (Option[Project], Aggregate)] = {
    val below = node.child match {
      case a: Aggregate => Some((None, a))
      case p @ Project(list, a: Aggregate) if list.forall(_.isInstanceOf[Attribute]) => Some((Some(p), a))
      case _ => None
    }
    node.suppressed match {
      case u: UntilWindowCloses if u.buffer.isBounded =>
        Left(s"its buffer is bounded (${u.buffer}); only an unbounded until_window_closes is fused")
      // A grace below the watermark delay closes windows before Spark's watermark does, and the
      // append-mode save emits a window only at the watermark: such a suppress runs unfused (the
      // buffered plan). A checkpoint written fused then refuses the restart (see decide).
      case _: UntilWindowCloses if node.earlyMs > 0 =>
        Left(s"its grace period (${node.graceMs}ms) is below the watermark delay (${node.graceMs + node.earlyMs}ms); " +
          "the fused plan closes windows only at the watermark")
      case _: UntilWindowCloses => below match {
          case Some((_, agg)) if agg.child.isStreaming && node.window.isDefined =>
            val stateful = root.collect { case p if StatefulOperatorSupport.isSparkStateful(p) => p }
            if (stateful.size == 1) Right(below.get)
            else Left(s"the query has ${stateful.size} Spark stateful operators; suppress is fused into a " +
              "windowed aggregation only when that aggregation is the query's only one")
          case _ => Left("its input is not directly a windowed streaming aggregation")
        }
      case other => Left(s"${other.describe} is not fused; only until_window_closes is")
    }
  }

  private def decide(session: SparkSession, shape: Either[String, _], ctx: StreamContext): Boolean = {
    val exec = ctx.execution
    val hadoopConf = session.sessionState.newHadoopConf()
    val stateRoot = new Path(exec.checkpointLocation)
    val fm = CheckpointFileManager.create(stateRoot, hadoopConf)
    val marker = new Path(new Path(stateRoot, AggregationId.toString), MarkerName)
    val enabled = SluiceConf(session.conf.getAll).get(SluiceConf.SuppressFused)
    val unfusedState = fm.exists(new Path(stateRoot, ctx.stateInfo.operatorId.toString))
    val why: Option[String] =
      if (!enabled) Some(s"${SluiceConf.SuppressFused.key} is false")
      else if (unfusedState)
        Some(s"the checkpoint has the suppress operator's state (state/${ctx.stateInfo.operatorId})")
      else shape.left.toOption
    why match {
      case None =>
        // A marker already there is only read: one of a newer format fails here.
        if (!fm.exists(marker)) writeMarker(fm, marker, ctx.stateInfo.operatorId) else readMarker(fm, marker)
        logInfo(s"Query ${exec.queryId}: suppress(until_window_closes) is fused into its aggregation " +
          s"(state operator $AggregationId, append-mode state save)")
        true
      case Some(reason) if readMarker(fm, marker).contains(ctx.stateInfo.operatorId) =>
        val msg = s"This query's checkpoint (${stateRoot.getParent}) was written with suppress(until_window_closes) " +
          s"fused into its windowed aggregation: the open windows are in the aggregation's state and there is no " +
          s"suppress buffer. Now suppress would run unfused because $reason, and the final results of the open " +
          s"windows would be lost. "
        if (!enabled) {
          throw new SluiceConfException(msg + s"Set ${SluiceConf.SuppressFused.key}=true for this checkpoint, or " +
            "start the query on a new checkpoint.")
        }
        throw new SuppressUsageException(msg + "Restore the query as it was, or start it on a new checkpoint.")
      case Some(reason) =>
        if (enabled && shape.isRight) {
          logInfo(s"Query ${exec.queryId}: suppress(until_window_closes) is not fused because $reason")
        }
        false
    }
  }

  /**
   * Under the real-time trigger suppress never runs fused: a checkpoint written fused has the open
   * windows in the aggregation's append-mode state and no suppress buffer, so it is refused.
   */
  def refuseFusedCheckpoint(session: SparkSession, ctx: StreamContext): Unit = {
    val stateRoot = new Path(ctx.execution.checkpointLocation)
    val fm = CheckpointFileManager.create(stateRoot, session.sessionState.newHadoopConf())
    if (readMarker(fm, new Path(new Path(stateRoot, AggregationId.toString), MarkerName)).contains(
        ctx.stateInfo.operatorId)) {
      throw new SuppressUsageException(RealTimeMode.unsupported("suppress on this checkpoint",
          s"the checkpoint (${stateRoot.getParent}) was written with suppress(until_window_closes) fused into its " +
            "windowed aggregation, which holds the open windows in Spark's append-mode state, and real-time mode " +
            "runs Spark's streamline aggregation, which has no such state",
          "Start the real-time query on a new checkpoint, or keep this one on a processing-time trigger."))
    }
  }

  /** The marker holds the id of the suppress operator that runs fused (its first line). */
  private def writeMarker(fm: CheckpointFileManager, marker: Path, suppressId: Long): Unit = {
    fm.mkdirs(marker.getParent) // written before the operator's first state files
    val out = fm.createAtomic(marker, overwriteIfPossible = true)
    try {
      out.write(FileFormats.FusedFinalMarker.textBytes(
          s"$suppressId\nsuppress operator $suppressId runs fused into state operator $AggregationId\n"))
    } catch {
      case e: Throwable => out.cancel(); throw e
    }
    out.close()
  }

  private def readMarker(fm: CheckpointFileManager, marker: Path): Option[Long] =
    if (!fm.exists(marker)) None
    else {
      val in = fm.open(marker)
      try FileFormats.FusedFinalMarker.readText(marker.toString, in.readAllBytes()).linesIterator.nextOption()
          .flatMap(_.trim.toLongOption)
      finally in.close()
    }

  /**
   * `agg` with its late records taken out and kept (see [[LateRecordsExec]]): closed by the
   * aggregation's own late-events watermark, as Spark's append-mode save would drop them.
   */
  private def withLateRecords(node: SuppressNode, agg: Aggregate, late: LateRecords, ctx: StreamContext): Aggregate =
    LateRecordsExec.placeOn(agg, late, node.window.get, 0L,
      new StreamContext(ctx.execution, StatefulOperatorSupport.stateInfo(ctx.execution, AggregationId)))

  /**
   * `agg` planned by Spark's streaming aggregation strategy, its state operators set up as Spark's
   * StateOpIdRule would for operator 0, but in append mode. None if the plan is not the expected one.
   */
  private def planFused(agg: Aggregate, ctx: StreamContext): Option[SparkPlan] = {
    val exec = ctx.execution
    val info = StatefulOperatorSupport.stateInfo(exec, AggregationId)
    exec.planner.StatefulAggregationStrategy(agg).headOption.flatMap { planned =>
      var saves = 0
      val fused = planned.transformUp {
        case s: StateStoreSaveExec if s.stateInfo.isEmpty =>
          saves += 1
          SparkNodes.stateSaveWith(s, info, OutputMode.Append())
        case r: StateStoreRestoreExec if r.stateInfo.isEmpty => SparkNodes.stateRestoreWith(r, info)
      }
      if (saves == 1) Some(FinalProjection(fused)) else None
    }
  }
}
