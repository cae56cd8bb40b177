package sluice.sessions.internal

import org.apache.hadoop.fs.Path
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.sluice.StreamContext

import sluice.conf.{SluiceConf, SluiceConfException}
import sluice.state.{FileFormats, StoreFiles}

/**
 * Which of its two plans a session aggregation's checkpoint was written with, kept beside its state
 * (`_sluice_session_plan` in the operator's state directory): its own update-mode operator (then
 * suppress, if any, holds the open sessions' latest rows in its buffer), or final results fused into
 * Spark's append-mode save (the open sessions only in the save's state). A restart with the other
 * plan would lose the final results of the sessions open at the switch, so it is refused, saying
 * which setting brings the recorded plan back. Read once per query run.
 */
private[sluice] object SessionPlanRecord {
  val FileName = "_sluice_session_plan"
  private val Fused = "fused final results"
  private val Updates = "session updates"
  private val checkedRuns = java.util.concurrent.ConcurrentHashMap.newKeySet[(java.util.UUID, Long)]()

  def check(session: SparkSession, ctx: StreamContext, finalOnly: Boolean): Unit = {
    val info = ctx.stateInfo
    if (!checkedRuns.add((info.queryRunId, info.operatorId))) return
    val root = new Path(info.checkpointLocation)
    val dir = new Path(root, info.operatorId.toString)
    val files = StoreFiles(dir, session.sessionState.newHadoopConf())
    val plan = if (finalOnly) Fused else Updates
    if (!files.exists(FileName)) {
      files.mkdirs() // written before the operator's first state files
      files.write(FileName)(_.write(FileFormats.SessionPlan.textBytes(plan + "\n")))
    } else {
      val in = files.open(FileName)
      val recorded =
        try FileFormats.SessionPlan.readText(new Path(dir, FileName).toString, in.readAllBytes()).trim
        finally in.close()
      if (recorded != plan) {
        val key = SluiceConf.SuppressFused.key
        throw new SluiceConfException(s"This query's checkpoint (${root.getParent}) ran its session windows as " +
          s"$recorded; it would now run as $plan, and the final results of the sessions open now would be lost. " +
          (if (recorded == Fused) s"Set $key=true for this checkpoint and keep suppress(until_window_closes(" +
             "BufferConfig.unbounded())) right above the aggregation"
           else s"Set $key=false for this checkpoint") + ", or start the query on a new checkpoint.")
      }
    }
  }
}
