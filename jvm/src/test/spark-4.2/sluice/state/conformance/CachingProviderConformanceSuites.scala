package sluice.state.conformance

import org.apache.spark.sql.internal.SQLConf

import sluice.state.conformance.SluiceConformanceSuite.{hdfsStyleSQLConf, rocksDBStyleSQLConf}

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
  extends CachingConformanceSuite("hdfs", commitIntervalMs) {
  override protected def columnFamilies: Boolean = false
  override protected def sqlConfForNewProvider(): SQLConf = getDefaultSQLConf(
    SQLConf.STATE_STORE_MIN_DELTAS_FOR_SNAPSHOT.defaultValue.get, SQLConf.MAX_BATCHES_TO_RETAIN_IN_MEMORY.defaultValue.get)
  override def getDefaultSQLConf(minDeltasForSnapshot: Int, numOfVersToRetainInMemory: Int): SQLConf =
    hdfsStyleSQLConf(minDeltasForSnapshot, numOfVersToRetainInMemory)
}

/** Over RocksDB, as Spark's RocksDB suite sets its provider up. */
abstract class CachingOverRocksDBConformanceSuite(commitIntervalMs: Long)
  extends CachingConformanceSuite("rocksdb", commitIntervalMs) {
  override protected def columnFamilies: Boolean = true
  override protected def sqlConfForNewProvider(): SQLConf = SQLConf.get
  override def getDefaultSQLConf(minDeltasForSnapshot: Int, numOfVersToRetainInMemory: Int): SQLConf =
    rocksDBStyleSQLConf(minDeltasForSnapshot)
}

object CachingConformanceSuite {
  /** The commit interval of the write-behind configurations: no batch of a test reaches it. */
  val WriteBehindIntervalMs: Long = 3600L * 1000
}

class CacheOverHdfsSuite extends CachingOverHdfsConformanceSuite(0L) {
  override protected def exclusions: Seq[(String, String)] = CacheOverHdfsSuite.Exclusions
}

object CacheOverHdfsSuite {
  val Exclusions: Seq[(String, String)] = Seq()
}

class CacheOverHdfsWriteBehindSuite extends CachingOverHdfsConformanceSuite(CachingConformanceSuite.WriteBehindIntervalMs) {
  override protected def exclusions: Seq[(String, String)] = CacheOverHdfsWriteBehindSuite.Exclusions
}

object CacheOverHdfsWriteBehindSuite {
  val Exclusions: Seq[(String, String)] = Seq()
}

class CacheOverRocksDBSuite extends CachingOverRocksDBConformanceSuite(0L) {
  override protected def exclusions: Seq[(String, String)] = CacheOverRocksDBSuite.Exclusions
}

object CacheOverRocksDBSuite {
  val Exclusions: Seq[(String, String)] = Seq()
}

class CacheOverRocksDBWriteBehindSuite
  extends CachingOverRocksDBConformanceSuite(CachingConformanceSuite.WriteBehindIntervalMs) {
  override protected def exclusions: Seq[(String, String)] = CacheOverRocksDBWriteBehindSuite.Exclusions
}

object CacheOverRocksDBWriteBehindSuite {
  val Exclusions: Seq[(String, String)] = Seq()
}
