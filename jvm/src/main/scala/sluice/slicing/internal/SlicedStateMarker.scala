package sluice.slicing.internal

import java.util.UUID

import org.apache.hadoop.fs.Path

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.sluice.StatefulOperatorSupport

import sluice.conf.SluiceConf
import sluice.spark.PlanTypes.{ColumnarRule, SparkPlan, StateStoreSaveExec, StatefulOperatorStateInfo}
import sluice.state.StoreFiles

/**
 * The marker of sliced state (`spark.sluice.window.slicing.state`, removed: conf.json's `removed`).
 * A query whose first micro-batch ran with that setting on wrote the marker file into its
 * aggregation's state directory (`<checkpoint>/state/<operator>/`), and kept that operator's state
 * rows per slice of its sliding windows, partitioned by the keys alone: rows Spark's aggregation
 * would misread without an error. So a query started on such a checkpoint fails when its run first
 * plans the aggregation, with one line naming the marker and what to do (a new checkpoint).
 *
 * Only the marker is read: once per query run and state operator (planning repeats every micro-batch),
 * and never outside the query's own run (`explain()` of a streaming DataFrame has no checkpoint).
 */
private[sluice] object SlicedStateMarker {
  private val Removed = SluiceConf.removedKey("window.slicing.state")

  /** The marker's file name (`_sluice_sliced_state`). */
  val MarkerName: String = Removed.marker.get

  def rule(session: SparkSession): ColumnarRule = new ColumnarRule {
    override def preColumnarTransitions: Rule[SparkPlan] = new Rule[SparkPlan] {
      override def apply(plan: SparkPlan): SparkPlan = {
        plan.foreach {
          case save: StateStoreSaveExec if save.stateInfo.isDefined => check(session, save.stateInfo.get)
          case _ =>
        }
        plan
      }
    }
  }

  /** Per query run, the state operators whose directory was checked. */
  private val checked = new java.util.WeakHashMap[UUID, java.util.Set[Long]]()

  private def check(session: SparkSession, info: StatefulOperatorStateInfo): Unit =
    if (StatefulOperatorSupport.currentStream(session).exists(_.runId == info.queryRunId)) {
      val ofRun = checked.synchronized {
        Option(checked.get(info.queryRunId)).getOrElse {
          val s = java.util.concurrent.ConcurrentHashMap.newKeySet[Long]()
          checked.put(info.queryRunId, s)
          s
        }
      }
      if (!ofRun.contains(info.operatorId)) {
        val dir = new Path(info.checkpointLocation, info.operatorId.toString)
        if (StoreFiles(dir, session.sessionState.newHadoopConf()).exists(MarkerName)) {
          throw new IllegalStateException(Removed.markerRefusal(info.operatorId,
              new Path(info.checkpointLocation).getParent.toString, dir.toString))
        }
        ofRun.add(info.operatorId)
      }
    }
}
