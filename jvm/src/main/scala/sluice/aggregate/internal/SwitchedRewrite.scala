package sluice.aggregate.internal

import scala.collection.mutable.ArrayBuffer

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.rules.Rule

import org.slf4j.LoggerFactory

import sluice.conf.{ConfEntry, SluiceConf}
import sluice.rewrites.NotApplied
import sluice.spark.RealTimePlans
import sluice.spark.PlanTypes.{ColumnarRule, SparkPlan}

/**
 * A physical rewrite that a boolean sluice setting switches on, for the plans of micro-batches and
 * batch queries: partial aggregation by hash (here) and window slicing (`sluice.slicing`), both
 * rewrites of Spark's aggregation plans.
 *
 * It runs before Spark's columnar transitions, so whole-stage code generation takes in the operators
 * it builds. The setting is read once per plan, when the rule runs, so a query started or restarted
 * after the user changes it is planned by the new value.
 *
 * Real-time plans are left as Spark makes them: their rows stream through the map side instead of
 * arriving as one batch, so a rewrite measured on micro-batches is not done there. Spark 4.3 plans
 * real-time aggregations with operators of its own, which no rewrite here matches; the check keeps
 * real-time plans out should a later Spark plan them with the operators a rewrite takes.
 *
 * `rewrite` is defined at the operators the rewrite examines and applied bottom-up to each: it
 * gives the operator's replacement, or why it stays. Each operator it replaces is logged at DEBUG
 * (dev/spark-suites counts them to show that Spark's suites ran the rewrites); the operators it
 * leaves alone are named with why in one INFO line per plan ([[NotApplied]], under the rewrite's
 * `name`).
 */
private[sluice] object SwitchedRewrite {

  /** Why an operator of a real-time plan stays. */
  val RealTime = "the plan reads in real time, which the rewrites leave as Spark plans it"

  def apply(session: SparkSession, switch: ConfEntry[Boolean], name: String)(
      rewrite: PartialFunction[SparkPlan, Either[String, SparkPlan]]): ColumnarRule =
    new ColumnarRule {
      override def preColumnarTransitions: Rule[SparkPlan] = new Rule[SparkPlan] {
        override def apply(plan: SparkPlan): SparkPlan =
          if (!SluiceConf(session.conf.getAll).get(switch)) plan
          else if (RealTimePlans.supported && RealTimePlans.readsInRealTime(plan)) {
            NotApplied.log(session, name,
              plan.collect { case p if rewrite.isDefinedAt(p) => NotApplied.describe(p) -> RealTime })
            plan
          } else {
            val notes = ArrayBuffer.empty[(String, String)]
            val rewritten = plan.transformUp {
              case p if rewrite.isDefinedAt(p) =>
                rewrite(p) match {
                  case Right(replaced) =>
                    rewriteLog.debug(s"${switch.key}: rewrote ${p.nodeName} as ${replaced.nodeName}")
                    replaced
                  case Left(why) =>
                    notes += NotApplied.describe(p) -> why
                    p
                }
            }
            NotApplied.log(session, name, notes.toSeq)
            rewritten
          }
      }
    }

  // Not `log`: Spark's Rule has one of its own, named after the anonymous class.
  private val rewriteLog = LoggerFactory.getLogger(getClass.getName.stripSuffix("$"))
}
