package sluice.state.conformance

import sluice.windowstore.InMemoryWindowStoreProvider

/**
 * sluice's window store (InMemoryWindowStoreProvider) against Spark's provider conformance suite,
 * set up as Spark's HDFS suite sets its provider up: the window store holds one column family of
 * one value per key (like the HDFS-backed store), so tests asking for column families run without.
 */
class WindowStoreSuite extends HdfsStyleSetup[InMemoryWindowStoreProvider] {
  override protected def exclusions: Seq[(String, String)] = WindowStoreSuite.Exclusions
  override protected def newProvider(): InMemoryWindowStoreProvider = new InMemoryWindowStoreProvider
}

object WindowStoreSuite {
  val Exclusions: Seq[(String, String)] = Seq(
    "get, put, remove, commit, and all data iterator" ->
      ("asserts the error for a version that was never committed says \"does not exist\"; the window store " +
        "reports CANNOT_LOAD_STATE_STORE.UNCATEGORIZED caused by \"<N>.wdelta is missing\" (the rest of the " +
        "test passes up to that assertion)"),
    "getStore with invalid versions" ->
      ("expects Spark's error conditions: a negative version fails with IllegalArgumentException instead of " +
        "SparkException CANNOT_LOAD_STATE_STORE.UNEXPECTED_VERSION, a missing one with " +
        "CANNOT_LOAD_STATE_STORE.UNCATEGORIZED instead of CANNOT_READ_STREAMING_STATE_FILE"),
    "SPARK-18342: commit fails when rename fails" ->
      ("injects a rename failure with a RawLocalFileSystem subclass; the window store writes the files of any " +
        "RawLocalFileSystem (subclasses too) with java.nio (sluice.state.StoreFiles), so the rename is never " +
        "called and the commit succeeds; through another file system its error would be its own, not the " +
        "HDFS store's CANNOT_COMMIT naming HDFSStateStore"),
    "SPARK-38320 - state store iterator behavior differences" ->
      ("pins HDFS's iterator behaviour for any store not named RocksDBStateStore (an iterator created before the " +
        "first write of a new version sees none of them); the window store's iterator walks the live map and sees " +
        "later writes (no operator relies on either: that was SPARK-38320)")
  ) ++ ConformanceShim.WindowStoreExclusions
}
