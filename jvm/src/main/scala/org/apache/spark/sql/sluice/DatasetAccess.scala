package org.apache.spark.sql.sluice

import org.apache.spark.sql.{AnalysisException, DataFrame, SparkSession}
import org.apache.spark.sql.catalyst.expressions.NamedExpression
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.classic.{Dataset => ClassicDataset, SparkSession => ClassicSession}

/**
 * The `private[sql]` parts of Dataset and AnalysisException that sluice's planning needs: making
 * a DataFrame of a logical plan, resolving a column name against a DataFrame, and raising an
 * analysis error whose text shows as it is.
 */
object DatasetAccess {
  def ofRows(session: SparkSession, plan: LogicalPlan): DataFrame =
    ClassicDataset.ofRows(session.asInstanceOf[ClassicSession], plan)

  /** `df`'s column `name` resolved as `df(name)` would resolve it, or None. */
  def resolve(df: DataFrame, name: String): Option[NamedExpression] =
    scala.util.Try(df.asInstanceOf[ClassicDataset[_]].resolve(name)).toOption

  /**
   * An AnalysisException with `msg` as its text: Spark's message-only error condition, which
   * pyspark (formatting analysis errors by their condition) raises as an AnalysisException.
   */
  def analysisError(msg: String): AnalysisException =
    new AnalysisException("_LEGACY_ERROR_TEMP_1332", Map("errorMessage" -> msg))
}
