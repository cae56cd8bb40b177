package sluice.spark

import org.apache.spark.sql.SparkSession

/**
 * Spark's server-side session (`sql.classic`), which holds the session state sluice reads (its SQL
 * settings, Hadoop configuration): feature code names it only through here.
 */
object SparkSessions {
  type ClassicSession = org.apache.spark.sql.classic.SparkSession

  /** The active session of this thread (sluice's table functions run inside one). */
  def active: ClassicSession = org.apache.spark.sql.classic.SparkSession.active

  /** `spark` as the server-side session it is in every JVM session (a Connect client never gets here). */
  def classic(spark: SparkSession): ClassicSession = spark.asInstanceOf[ClassicSession]
}
