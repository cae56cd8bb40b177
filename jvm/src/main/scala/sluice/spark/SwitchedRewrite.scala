package sluice.spark

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.execution.{ColumnarRule, SparkPlan}

import org.slf4j.LoggerFactory

import sluice.conf.{ConfEntry, SluiceConf}

/**
 * A physical rewrite that a boolean sluice setting switches on, for the plans of micro-batches and
 * batch queries.
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
 * `rewrite` is applied bottom-up to every operator it is defined at; it returns the operator itself
 * where it does not apply. Each operator it replaces is logged at DEBUG (dev/spark-suites counts them
 * to show that Spark's suites ran the rewrites).
 */
private[sluice] object SwitchedRewrite {
  def apply(session: SparkSession, switch: ConfEntry[Boolean])(rewrite: PartialFunction[SparkPlan, SparkPlan]): ColumnarRule =
    rule(switch.key, () => SluiceConf(session.conf.getAll).get(switch))(rewrite)

  /**
   * A rewrite on whatever the setting `key` says, which `rewrite` reads itself per operator: where a
   * checkpoint pins what a query was first planned with, the setting alone does not decide.
   */
  def perOperator(key: String)(rewrite: PartialFunction[SparkPlan, SparkPlan]): ColumnarRule =
    rule(key, () => true)(rewrite)

  private def rule(key: String, on: () => Boolean)(rewrite: PartialFunction[SparkPlan, SparkPlan]): ColumnarRule =
    new ColumnarRule {
      override def preColumnarTransitions: Rule[SparkPlan] = new Rule[SparkPlan] {
        override def apply(plan: SparkPlan): SparkPlan =
          if (!on() || (RealTimePlans.supported && RealTimePlans.readsInRealTime(plan))) plan
          else plan.transformUp { case p if rewrite.isDefinedAt(p) =>
            val replaced = rewrite(p)
            if (!(replaced eq p)) rewriteLog.debug(s"$key: rewrote ${p.nodeName} as ${replaced.nodeName}")
            replaced
          }
      }
    }

  // Not `log`: Spark's Rule has one of its own, named after the anonymous class.
  private val rewriteLog = LoggerFactory.getLogger(getClass.getName.stripSuffix("$"))
}
