package sluice.state.conformance

import org.apache.spark.SPARK_VERSION
import org.apache.spark.sql.internal.SQLConf

/**
 * What Spark 4.2's `StateStoreSuiteBase` asks of the shared conformance suites that another minor's
 * does not: row checksums, carried into an HDFS-style conf as Spark's own suite does, and a metric
 * test the window store has no counterpart for.
 *
 * Spark 4.3 runs the same 4.2.0 test-jar (Maven Central serves no 4.3 test-jars; build.sbt's
 * sparkTestJars): Spark's 4.2 contract on the 4.3 runtime. A test the 4.2.0 classes cannot link
 * against 4.3 is excluded from every suite there, Spark's own providers included, with the signature
 * that changed.
 */
object ConformanceShim {
  def carryRowChecksum(sqlConf: SQLConf): Unit =
    sqlConf.setConf(SQLConf.STATE_STORE_ROW_CHECKSUM_ENABLED, SQLConf.get.stateStoreRowChecksumEnabled)

  /** The runtime is a later minor than the test-jar (4.2.0) was built for. */
  private val laterRuntime = !SPARK_VERSION.startsWith("4.2.")

  /** Tests of the 4.2.0 test-jar that Spark's own providers fail on the 4.3 runtime too: they call a
   *  Spark method whose signature 4.3 changed, or assert 4.2's behaviour of Spark's `StateStore`
   *  object itself rather than of the provider under test. */
  private val UnlinkedOnLaterRuntime: Seq[(String, String)] =
    if (!laterRuntime) Nil
    else {
      val sizeMetric = "constructs StateStoreCustomSizeMetric(name, desc), a constructor Spark 4.3 no longer has " +
        "(NoSuchMethodError)"
      Seq(
        "StateStore.get" ->
          ("calls StateStore.removeFromLoadedProvidersAndClose with a default second argument that Spark 4.3 " +
            "no longer has (NoSuchMethodError)"),
        "SPARK-34270: StateStoreMetrics.combine should not override individual metrics" -> sizeMetric,
        "SPARK-35763: StateStoreCustomMetric withNewDesc and createSQLMetric" -> sizeMetric,
        "SPARK-48997: maintenance threads with exceptions unload only themselves" ->
          ("expects Spark's StateStore object to unload a provider whose maintenance threw within 5 s; on " +
            "Spark 4.3 it stays loaded (StateStore.isLoaded stays true)"))
    }

  /** Excluded from every record-cache configuration. */
  val CachingExclusions: Seq[(String, String)] = UnlinkedOnLaterRuntime

  /** Excluded from the window store's suite. */
  val WindowStoreExclusions: Seq[(String, String)] = Seq(
    "SPARK-54063: forceSnapshot metric populated when shouldForceSnapshotOnCommit is true" ->
      ("the window store writes a snapshot on a forced commit but reports no forceSnapshotCount metric " +
        "(its metrics: windowStoreSegments, windowStoreMemoryBytes, expiredWindowRecordDropTotal, " +
        "windowStoreCompactionBytes)")) ++ UnlinkedOnLaterRuntime

  /** Excluded from Spark's own providers run through the same harness (the baseline). */
  val BaselineExclusions: Seq[(String, String)] = UnlinkedOnLaterRuntime
}
