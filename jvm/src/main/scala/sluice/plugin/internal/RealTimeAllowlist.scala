package sluice.plugin.internal

import java.util.Collections

import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.sluice.{RealTimeProgress, SluiceStateStoreExec, StatefulOperatorSupport}

import sluice.cache.internal.EmitCacheSkippedExec
import sluice.spark.PlanTypes.{ColumnarRule, SparkPlan}
import sluice.conf.RealTimeMode
import sluice.spark.RealTimePlans
import sluice.suppress.SuppressUsageException

/**
 * sluice's operators under Spark's real-time operator allowlist (Spark 4.3), run on every physical
 * plan after its exchanges are in place (a post-columnar-transition rule: part of each batch's
 * planning, before Spark runs its own check on the planned batch).
 *
 * Spark checks every operator of a real-time plan against a fixed list of class names and has no
 * API to add one, so a plan with a sluice operator fails unless the check is off. Spark reads the
 * switch (`spark.sql.streaming.realTimeMode.allowlistCheck`, default true) from the conf of the
 * session that started the query, at every batch: it cannot be turned off for one query alone.
 * So, when a real-time plan with a sluice operator is first planned in a session whose switch has
 * its default, sluice turns it off in that session and from then on runs Spark's own check itself
 * on every real-time plan of the session, with sluice's operators taken out, and on its sink:
 * every other operator and every sink is refused as before, with Spark's own error. Why this and
 * not another way:
 *  - a key of the user's `true` is a decision, never overridden: the query is refused, saying why;
 *  - a key of the user's `false` turned the check off for everything: sluice checks nothing either;
 *  - disguising sluice's operators as an allowlisted one (MapPartitionsExec) would pass the check's
 *    letter, not its intent, and hide them from explain().
 * Spark then logs its warning about the operators it did not check at each batch.
 */
private[sluice] object RealTimeAllowlist extends Logging {

  /** Sessions whose switch sluice turned off (weak: a session is forgotten once gone). */
  private val turnedOff = Collections.synchronizedMap(new java.util.WeakHashMap[SparkSession, java.lang.Boolean]())

  def rule(session: SparkSession): ColumnarRule = new ColumnarRule {
    override def postColumnarTransitions: Rule[SparkPlan] = new Rule[SparkPlan] {
      override def apply(plan: SparkPlan): SparkPlan = {
        if (RealTimePlans.supported && RealTimePlans.readsInRealTime(plan)) check(session, plan)
        plan
      }
    }
  }

  // The emission cache's marker where it could not be placed passes rows through, as in micro-batches;
  // the aggregation's stages under suppress are Spark's own, forwarding progress rows.
  private def isSluice(p: SparkPlan): Boolean =
    p.isInstanceOf[SluiceStateStoreExec] || p.isInstanceOf[EmitCacheSkippedExec] || RealTimeProgress.isProgressNode(p)

  private def check(session: SparkSession, plan: SparkPlan): Unit =
    StatefulOperatorSupport.startingSession(session).foreach { starting =>
      val key = RealTimePlans.AllowlistCheckKey
      val hasSluice = plan.exists(isSluice)
      val setting = StatefulOperatorSupport.explicitSetting(starting, key).map(_.trim.toLowerCase)
      val ours = turnedOff.containsKey(starting)
      setting match {
        case Some("true") if hasSluice => throw new SuppressUsageException(RealTimeMode.allowlistRefusal(key))
        case Some(_) if !ours => // the user's own choice, either way: Spark's check (or none) as set
        case None if !hasSluice => // Spark checks the plan itself
        case _ =>
          if (setting.isEmpty) {
            turnedOff.put(starting, java.lang.Boolean.TRUE)
            starting.conf.set(key, "false")
            logInfo(s"sluice set $key=false in the session that started a real-time query with sluice's " +
              "operators (Spark's allowlist cannot name them); sluice runs Spark's check on every real-time " +
              "plan of this session instead, with its own operators taken out")
          }
          RealTimePlans.checkAllowlist(plan, isSluice, StatefulOperatorSupport.currentSink(session))
      }
    }
}
