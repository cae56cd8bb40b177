package sluice.state.conformance

import org.apache.spark.sql.internal.SQLConf

import sluice.state.conformance.SluiceConformanceSuite.hdfsStyleSQLConf
import sluice.windowstore.InMemoryWindowStoreProvider

/**
 * sluice's window store (InMemoryWindowStoreProvider) against Spark's provider conformance suite,
 * set up as Spark's HDFS suite sets its provider up: the window store holds one column family of
 * one value per key (like the HDFS-backed store), so tests asking for column families run without.
 */
class WindowStoreSuite extends SluiceConformanceSuite[InMemoryWindowStoreProvider] {
  override protected def exclusions: Seq[(String, String)] = WindowStoreSuite.Exclusions
  override protected def newProvider(): InMemoryWindowStoreProvider = new InMemoryWindowStoreProvider
  override protected def columnFamilies: Boolean = false
  override protected def sqlConfForNewProvider(): SQLConf = getDefaultSQLConf(
    SQLConf.STATE_STORE_MIN_DELTAS_FOR_SNAPSHOT.defaultValue.get, SQLConf.MAX_BATCHES_TO_RETAIN_IN_MEMORY.defaultValue.get)
  override def getDefaultSQLConf(minDeltasForSnapshot: Int, numOfVersToRetainInMemory: Int): SQLConf =
    hdfsStyleSQLConf(minDeltasForSnapshot, numOfVersToRetainInMemory)
}

object WindowStoreSuite {
  val Exclusions: Seq[(String, String)] = Seq()
}
