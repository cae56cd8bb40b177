package org.apache.spark.sql.sluicetest

import org.apache.spark.sql.execution.streaming.state.{HDFSBackedStateStoreProvider, RocksDBStateStoreProvider}

import sluice.state.conformance.{ConformanceShim, HdfsStyleSetup, RocksDBStyleSetup}

/**
 * The reference: Spark's own providers through the same harness as sluice's, so that what the
 * sluice suites fail can be told apart from what Spark's providers fail here too. (In this
 * package: Spark's providers are private to org.apache.spark.sql.)
 */
class SparkHdfsBaselineSuite extends HdfsStyleSetup[HDFSBackedStateStoreProvider] {
  override protected def exclusions: Seq[(String, String)] = ConformanceShim.BaselineExclusions
  override protected def newProvider(): HDFSBackedStateStoreProvider = new HDFSBackedStateStoreProvider
}

class SparkRocksDBBaselineSuite extends RocksDBStyleSetup[RocksDBStateStoreProvider] {
  override protected def exclusions: Seq[(String, String)] = ConformanceShim.BaselineExclusions
  override protected def newProvider(): RocksDBStateStoreProvider = new RocksDBStateStoreProvider
}
