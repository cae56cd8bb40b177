package org.apache.spark.sql.sluicetest

import org.apache.spark.sql.execution.streaming.state.{HDFSBackedStateStoreProvider, RocksDBStateStoreProvider}
import org.apache.spark.sql.internal.SQLConf

import sluice.state.conformance.SluiceConformanceSuite
import sluice.state.conformance.SluiceConformanceSuite.{hdfsStyleSQLConf, rocksDBStyleSQLConf}

/**
 * The reference: Spark's own providers through the same harness as sluice's, so that what the
 * sluice suites fail can be told apart from what Spark's providers fail here too. (In this
 * package: Spark's providers are private to org.apache.spark.sql.)
 */
class SparkHdfsBaselineSuite extends SluiceConformanceSuite[HDFSBackedStateStoreProvider] {
  override protected def exclusions: Seq[(String, String)] = Seq(SparkProviderBaselines.GoldenCheckpointInJar)
  override protected def newProvider(): HDFSBackedStateStoreProvider = new HDFSBackedStateStoreProvider
  override protected def columnFamilies: Boolean = false
  override protected def sqlConfForNewProvider(): SQLConf = getDefaultSQLConf(
    SQLConf.STATE_STORE_MIN_DELTAS_FOR_SNAPSHOT.defaultValue.get, SQLConf.MAX_BATCHES_TO_RETAIN_IN_MEMORY.defaultValue.get)
  override def getDefaultSQLConf(minDeltasForSnapshot: Int, numOfVersToRetainInMemory: Int): SQLConf =
    hdfsStyleSQLConf(minDeltasForSnapshot, numOfVersToRetainInMemory)
}

class SparkRocksDBBaselineSuite extends SluiceConformanceSuite[RocksDBStateStoreProvider] {
  override protected def exclusions: Seq[(String, String)] = Seq(SparkProviderBaselines.GoldenCheckpointInJar)
  override protected def newProvider(): RocksDBStateStoreProvider = new RocksDBStateStoreProvider
  override protected def columnFamilies: Boolean = true
  override protected def sqlConfForNewProvider(): SQLConf = SQLConf.get
  override def getDefaultSQLConf(minDeltasForSnapshot: Int, numOfVersToRetainInMemory: Int): SQLConf =
    rocksDBStyleSQLConf(minDeltasForSnapshot)
}

object SparkProviderBaselines {
  val GoldenCheckpointInJar: (String, String) = "Load spark 4.0 golden checkpoint written without checksum" ->
    ("reads Spark 4.0's golden checkpoints as files from the test resources, which in the published test-jar " +
      "are inside the jar (CANNOT_READ_DELTA_FILE_NOT_EXISTS / CANNOT_READ_STREAMING_STATE_FILE on a jar:...! path)")
}
