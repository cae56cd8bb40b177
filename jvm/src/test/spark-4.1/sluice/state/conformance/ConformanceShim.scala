package sluice.state.conformance

import org.apache.spark.sql.internal.SQLConf

/**
 * What Spark 4.1's `StateStoreSuiteBase` asks of the shared conformance suites that another minor's
 * does not: its checksum tests count files in Spark's own layouts, and its golden-checkpoint test
 * reads files that the published test-jar keeps inside the jar. The reasons are stated once here.
 */
object ConformanceShim {

  /** 4.1 has no row checksums: nothing to carry into an HDFS-style conf. */
  def carryRowChecksum(sqlConf: SQLConf): Unit = ()

  private val GoldenInJar = "it reads Spark 4.0's golden checkpoints as files from the test resources, which in " +
    "the published test-jar are inside the jar, so Spark's own providers fail it in this harness too"

  /** Excluded from every record-cache configuration. */
  val CachingExclusions: Seq[(String, String)] = Seq(
    "checksum files are also cleaned up during maintenance" ->
      ("counts the files left in the store's checkpoint directory in the layout of Spark's provider, chosen by " +
        "provider class (HDFSBackedStateStoreProvider, else RocksDB's); the cache adds its delegate marker " +
        "(_sluice_cache_delegate) beside the delegate's files, and is not an HDFSBackedStateStoreProvider"),
    "overwrite state file without overwriting checksum file" ->
      ("counts the files in the store's checkpoint directory (8: 3 deltas/changelogs, a snapshot, their " +
        "checksums); the cache adds its delegate marker (_sluice_cache_delegate)"),
    "Load spark 4.0 golden checkpoint written without checksum" ->
      s"loads checkpoints Spark 4.0's providers wrote, choosing by provider class; $GoldenInJar"
  )

  /** Excluded from the window store's suite. */
  val WindowStoreExclusions: Seq[(String, String)] = Seq(
    "checksum files are also cleaned up during maintenance" ->
      ("counts checksum files (spark.sql.streaming.checkpoint.fileChecksum.enabled) and snapshots in Spark's " +
        "providers' layouts; the window store writes no checksum files beside its own (N.wdelta, N.wsnapshot) " +
        "and snapshots every spark.sluice.windowstore.snapshot.interval versions, not by minDeltasForSnapshot"),
    "overwrite state file without overwriting checksum file" ->
      "counts checksum files beside the state files; the window store writes none",
    "Load spark 4.0 golden checkpoint written without checksum" ->
      ("loads checkpoints written by Spark 4.0's HDFS-backed and RocksDB providers, by provider class (any other " +
        "fails with \"Unknown ProviderClass\"); the window store has its own file format")
  )

  /** Excluded from Spark's own providers run through the same harness (the baseline). */
  val BaselineExclusions: Seq[(String, String)] = Seq(
    "Load spark 4.0 golden checkpoint written without checksum" -> GoldenInJar)
}
