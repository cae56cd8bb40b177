package sluice.spark

import org.apache.spark.sql.execution.streaming.state.StateStoreProvider

/**
 * The Spark 4.2 side of the seam. Each supported minor has an object of this name with the same
 * members; the build compiles the one of its minor (build.sbt: jvm/src/main/spark-<minor>/ and the
 * range folders spark-<from>+/ that include it), so the choice is made once, at build time.
 *
 * spark-4.2: maintenance is one call.
 */
object SparkShim extends SparkShimFrom42 {

  /** The Spark minor this jar is compiled for; the plugin refuses any other at start. */
  val sparkMinor: String = "4.2"

  /** Runs maintenance of another provider (a delegate). */
  def maintain(p: StateStoreProvider, work: Maintenance): Unit = p.doMaintenance()
}
