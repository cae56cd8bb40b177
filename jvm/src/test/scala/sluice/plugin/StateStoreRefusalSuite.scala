package sluice.plugin

import org.scalatest.funsuite.AnyFunSuite

import sluice.conf.SluiceConf

/** The session-start check of state store settings a sluice provider refuses when a store opens. */
class StateStoreRefusalSuite extends AnyFunSuite {
  private val Provider = "spark.sql.streaming.stateStore.providerClass"
  private val Format = "spark.sql.streaming.stateStore.checkpointFormatVersion"
  private val Interval = "spark.sluice.commit.interval.ms"
  private val Delegate = "spark.sluice.statestore.cache.delegate"
  private val Caching = "sluice.cache.CachingStateStoreProvider"
  private val WindowStore = "sluice.windowstore.InMemoryWindowStoreProvider"

  private def refusal(settings: (String, String)*): Option[String] =
    SluicePlugin.stateStoreRefusal(settings.toMap, SluiceConf.validated(settings))

  test("write-behind under format 2 is refused naming the keys, their values and what to set") {
    val rocksdb = refusal(Provider -> Caching, Interval -> "1h", Format -> "2")
    assert(rocksdb.contains(s"$Interval=3600000 with $Provider=$Caching needs $Format=1, got 2: the write-behind " +
        "cache numbers its delegate's versions itself, which the store checkpoint ids of format 2 cannot follow. " +
        s"Set $Format=1 (or unset it), or $Interval=0"))
    // Spark's HDFS-backed store refuses format 2 at any interval: only the format is worth changing.
    val hdfs = refusal(Provider -> Caching, Interval -> "1h", Format -> "2", Delegate -> "hdfs")
    assert(hdfs.exists(_.endsWith(s"Set $Format=1 (or unset it)")))
  }

  test("the window store under format 2 is refused as the session's provider or the cache's delegate") {
    val message = s"$WindowStore needs $Format=1, got 2: it names its files by version alone, without the " +
      s"store checkpoint ids of format 2. Set $Format=1 (or unset it)"
    assert(refusal(Provider -> WindowStore, Format -> "2").contains(message))
    assert(refusal(Provider -> Caching, Delegate -> "in_memory_window", Format -> "2").contains(message))
  }

  test("what runs is not refused: format 1 or unset, interval 0, other providers, a format Spark rejects itself") {
    assert(refusal(Provider -> Caching, Interval -> "1h", Format -> "1").isEmpty)
    assert(refusal(Provider -> Caching, Interval -> "1h").isEmpty)
    assert(refusal(Provider -> Caching, Interval -> "0", Format -> "2").isEmpty)
    assert(refusal(Provider -> WindowStore).isEmpty)
    assert(refusal(Interval -> "1h", Format -> "2").isEmpty) // Spark's default provider
    assert(refusal(Provider -> "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        Interval -> "1h", Format -> "2").isEmpty)
    assert(refusal(Provider -> Caching, Interval -> "1h", Format -> "two").isEmpty)
  }
}
