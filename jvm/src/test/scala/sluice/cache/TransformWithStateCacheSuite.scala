package sluice.cache

import java.nio.file.Files

import scala.collection.mutable.ArrayBuffer
import scala.jdk.CollectionConverters._

import org.apache.spark.sql.{Dataset, Encoders, SparkSession}
import org.apache.spark.sql.execution.streaming.runtime.MemoryStream
import org.apache.spark.sql.streaming._
import org.scalatest.funsuite.AnyFunSuite

import sluice.spark.SparkShim

/** Value, list (multi-value column family) and map (prefix scan) state on one key. */
class CountingProcessor extends StatefulProcessor[String, (String, Long), (String, Long, Long, Long)] {
  @transient private var count: ValueState[Long] = _
  @transient private var seen: ListState[Long] = _
  @transient private var byValue: MapState[Long, Long] = _

  override def init(outputMode: OutputMode, timeMode: TimeMode): Unit = {
    count = getHandle.getValueState[Long]("count", Encoders.scalaLong, TTLConfig.NONE)
    seen = getHandle.getListState[Long]("seen", Encoders.scalaLong, TTLConfig.NONE)
    byValue = getHandle.getMapState[Long, Long]("byValue", Encoders.scalaLong, Encoders.scalaLong, TTLConfig.NONE)
  }

  override def handleInputRows(key: String, rows: Iterator[(String, Long)], timerValues: TimerValues)
      : Iterator[(String, Long, Long, Long)] = {
    var n = if (count.exists()) count.get() else 0L
    rows.foreach { case (_, v) =>
      n += 1
      count.update(n) // many writes of one key in one batch: coalesced by the cache
      seen.appendValue(v)
      byValue.updateValue(v, (if (byValue.containsKey(v)) byValue.getValue(v) else 0L) + 1)
    }
    Iterator((key, n, seen.get().size.toLong, byValue.iterator().map(_._2).sum))
  }
}

class TransformWithStateCacheSuite extends AnyFunSuite {
  private val rocksdb = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

  private def run(spark: SparkSession, provider: String): (Seq[(String, Long, Long, Long)], Seq[Map[String, Long]]) = {
    import spark.implicits._
    implicit val ctx = spark.sqlContext
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", provider)
    val ckpt = Files.createTempDirectory("sluice-tws").toString
    val input = MemoryStream[(String, Long)]
    val out = ArrayBuffer.empty[(String, Long, Long, Long)]
    val metrics = ArrayBuffer.empty[Map[String, Long]]
    def start(): StreamingQuery = input.toDS().groupByKey(_._1)
      .transformWithState(new CountingProcessor, TimeMode.None(), OutputMode.Update())
      .writeStream.outputMode("update").option("checkpointLocation", ckpt)
      .foreachBatch((ds: Dataset[(String, Long, Long, Long)], _: Long) => { out ++= ds.collect(); () })
      .start()
    def collect(q: StreamingQuery): Unit = q.recentProgress.filter(_.stateOperators.nonEmpty)
      .foreach(p =>
        metrics += p.stateOperators.head.customMetrics.asScala.map { case (k, v) => k -> v.longValue() }.toMap)
    var q = start()
    val batches = Seq(
      Seq("a" -> 1L, "a" -> 2L, "b" -> 1L, "a" -> 1L),
      Seq("a" -> 3L, "c" -> 1L, "c" -> 1L),
      Seq("c" -> 5L, "a" -> 2L, "a" -> 2L))
    batches.zipWithIndex.foreach { case (b, i) =>
      if (i == 2) { collect(q); q.stop(); q = start() } // restart on the same checkpoint
      input.addData(b)
      q.processAllAvailable()
    }
    collect(q)
    q.stop()
    spark.conf.unset("spark.sql.streaming.stateStore.providerClass")
    (out.toSeq, metrics.toSeq)
  }

  private def session(): SparkSession = {
    val spark = SparkSession.builder().master("local[2]").appName("tws-cache")
      .config("spark.sql.shuffle.partitions", "1").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark
  }

  // spark-4.1: transformWithState takes any provider with column families and list state.
  if (SparkShim.sparkMinor == "4.1") {
    test("transformWithState on the cache over RocksDB gives the delegate's results, across a restart") {
      val spark = session()
      try {
        val (plain, _) = run(spark, rocksdb)
        val (cached, metrics) = run(spark, classOf[CachingStateStoreProvider].getName)
        assert(plain.nonEmpty)
        assert(cached.sortBy(_.toString) == plain.sortBy(_.toString))
        // final state: a has 6 rows; its list and its map hold every one of them
        assert(cached.filter(_._1 == "a").maxBy(_._2) == (("a", 6L, 6L, 6L)))
        assert(metrics.map(_("cacheHits")).sum > 0)
        assert(metrics.exists(_.contains("rocksdbCommitWriteBatchLatency")) || metrics.exists(
          _.keys.exists(_.startsWith("rocksdb"))))
      } finally spark.stop()
    }
  } else {
    // spark-4.2: transformWithState accepts Spark's RocksDB provider class alone, by name.
    test("transformWithState refuses the cache at query start with Spark's own error, naming the provider") {
      val spark = session()
      try {
        val e = intercept[Exception](run(spark, classOf[CachingStateStoreProvider].getName))
        val messages = Iterator.iterate[Throwable](e)(_.getCause).takeWhile(_ != null).map(_.getMessage).toSeq
        assert(
          messages.exists(m =>
            m != null && m.contains("STORE_BACKEND_NOT_SUPPORTED_FOR_TWS") &&
            m.contains(classOf[CachingStateStoreProvider].getName)), messages.mkString("\n"))
        val (plain, _) = run(spark, rocksdb) // the session is still usable for the supported provider
        assert(plain.filter(_._1 == "a").maxBy(_._2) == (("a", 6L, 6L, 6L)))
      } finally spark.stop()
    }
  }
}
