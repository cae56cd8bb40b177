package sluice.state.conformance

import sluice.state.conformance.CachingConformanceSuite._

/**
 * sluice's record cache (CachingStateStoreProvider) in each configuration against Spark's
 * provider conformance suite: over the HDFS-backed store and over RocksDB, committing the delegate
 * every batch or write-behind (commit interval long enough that the delegate commits only when a
 * batch forces it). Each is set up as Spark's suite of its delegate is.
 */
abstract class CachingConformanceSuite(delegate: String, commitIntervalMs: Long)
  extends SluiceConformanceSuite[TaskScopedCachingProvider] {
  override protected def newProvider(): TaskScopedCachingProvider =
    new TaskScopedCachingProvider(delegate, commitIntervalMs)
}

/** Over the HDFS-backed store, as Spark's HDFS suite sets its provider up (no column families). */
abstract class CachingOverHdfsConformanceSuite(commitIntervalMs: Long)
  extends CachingConformanceSuite("hdfs", commitIntervalMs) with HdfsStyleSetup[TaskScopedCachingProvider]

/** Over RocksDB, as Spark's RocksDB suite sets its provider up. */
abstract class CachingOverRocksDBConformanceSuite(commitIntervalMs: Long)
  extends CachingConformanceSuite("rocksdb", commitIntervalMs) with RocksDBStyleSetup[TaskScopedCachingProvider]

object CachingConformanceSuite {

  /** The commit interval of the write-behind configurations: no batch of a test reaches it. */
  val WriteBehindIntervalMs: Long = 3600L * 1000

  // Reasons shared by several configurations.
  val InvalidVersionsByClass: (String, String) = "getStore with invalid versions" ->
    ("expects CANNOT_READ_DELTA_FILE_NOT_EXISTS only of an HDFSBackedStateStoreProvider instance (isInstanceOf), " +
      "else CANNOT_READ_STREAMING_STATE_FILE; the cache passes its HDFS delegate's error " +
      "(CANNOT_READ_DELTA_FILE_NOT_EXISTS) through unchanged")
  val IteratorSemanticsByClass: (String, String) = "SPARK-38320 - state store iterator behavior differences" ->
    ("pins which writes made after an iterator's creation it sees, per Spark provider, chosen by the store's class " +
      "name (RocksDBStateStore, else HDFS's); sluice's store is neither: over RocksDB it returns RocksDB's iterator, " +
      "and under write-behind it lays the rows logged since the delegate's last commit, as of the iterator's " +
      "creation, over the delegate's (no operator relies on either: that was SPARK-38320)")
  val WriteBehindCommitError: (String, String) = "SPARK-18342: commit fails when rename fails" ->
    ("the commit fails, as it must, but in a batch where the delegate does not commit the failing write is " +
      "sluice's own (write-behind log / delegate marker through Spark's CheckpointFileManager), reported as " +
      "FAILED_RENAME_TEMP_FILE, not as the delegate's CANNOT_WRITE_STATE_STORE.CANNOT_COMMIT")
}

class CacheOverHdfsSuite extends CachingOverHdfsConformanceSuite(0L) {
  override protected def exclusions: Seq[(String, String)] = CacheOverHdfsSuite.Exclusions
}

object CacheOverHdfsSuite {
  val Exclusions: Seq[(String, String)] = Seq(
    InvalidVersionsByClass
  ) ++ ConformanceShim.CachingExclusions
}

class CacheOverHdfsWriteBehindSuite
  extends CachingOverHdfsConformanceSuite(CachingConformanceSuite.WriteBehindIntervalMs) {
  override protected def exclusions: Seq[(String, String)] = CacheOverHdfsWriteBehindSuite.Exclusions
}

object CacheOverHdfsWriteBehindSuite {
  val Exclusions: Seq[(String, String)] = Seq(
    InvalidVersionsByClass,
    IteratorSemanticsByClass,
    WriteBehindCommitError
  ) ++ ConformanceShim.CachingExclusions
}

class CacheOverRocksDBSuite extends CachingOverRocksDBConformanceSuite(0L) {
  override protected def exclusions: Seq[(String, String)] = CacheOverRocksDBSuite.Exclusions
}

object CacheOverRocksDBSuite {
  val Exclusions: Seq[(String, String)] = Seq(
    IteratorSemanticsByClass,
    "SPARK-18342: commit fails when rename fails" ->
      ("expects the error to name \"HDFSStateStore\" unless the store's class name contains RocksDBStateStore; the " +
        "cache passes RocksDB's CANNOT_COMMIT error, naming RocksDBStateStore, through unchanged")
  ) ++ ConformanceShim.CachingExclusions
}

class CacheOverRocksDBWriteBehindSuite
  extends CachingOverRocksDBConformanceSuite(CachingConformanceSuite.WriteBehindIntervalMs) {
  override protected def exclusions: Seq[(String, String)] = CacheOverRocksDBWriteBehindSuite.Exclusions
}

object CacheOverRocksDBWriteBehindSuite {
  val Exclusions: Seq[(String, String)] = Seq(
    IteratorSemanticsByClass,
    WriteBehindCommitError
  ) ++ ConformanceShim.CachingExclusions
}
