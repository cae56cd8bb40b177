package org.apache.spark.sql.sluicetest

import java.nio.charset.StandardCharsets
import java.nio.file.Files

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.QueryTest
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.streaming.Trigger
import org.apache.spark.sql.test.SharedSparkSession

/**
 * dev/spark-suites' check that a configuration given as `spark.*` JVM system properties reaches the
 * sessions Spark's own suites run in (SharedSparkSession's TestSparkSession): runs one stateful query
 * and looks at the provider that served it (its custom metrics), the session's planner strategies
 * (sluice's extensions) and the plugin setting. `-Dsluice.probe.expect=` names what must be found:
 * `spark` (Spark's default provider, no sluice), `cache-hdfs`, `cache-rocksdb`, `windowstore`;
 * `-Dsluice.probe.commitIntervalMs=` the commit interval the session must have, if any. Not run by
 * `sbt test` (build.sbt filters it out): it only means something with those properties.
 */
class SessionDefaultsProbe extends QueryTest with SharedSparkSession {
  test("the configuration reaches Spark's test sessions") {
    val expect = sys.props.getOrElse("sluice.probe.expect", cancel("sluice.probe.expect is not set"))
    val dir = Files.createTempDirectory("sluice-probe")
    Files.write(dir.resolve("part-0.txt"), Seq("a", "b", "a", "c").asJava, StandardCharsets.UTF_8)
    val q = spark.readStream.text(dir.toString).groupBy("value").count()
      .writeStream.format("memory").queryName("sluice_probe").outputMode("update")
      .trigger(Trigger.AvailableNow()).start()
    q.awaitTermination()
    val ops = q.lastProgress.stateOperators
    assert(ops.nonEmpty, "the probe query reported no stateful operator")
    val metrics = ops.head.customMetrics.keySet.asScala.toSet
    val provider = spark.conf.get(SQLConf.STATE_STORE_PROVIDER_CLASS.key)
    val strategies = spark.sessionState.planner.extraPlanningStrategies.map(_.getClass.getName)
    val sluiceStrategies = strategies.filter(_.startsWith("sluice."))
    val plugins = spark.sparkContext.getConf.get("spark.plugins", "")
    val interval = spark.conf.getOption("spark.sluice.commit.interval.ms")
    // One line the route keeps in its summary.
    println(s"sluice-probe: expect=$expect provider=$provider delegate=" +
      s"${spark.conf.getOption("spark.sluice.statestore.cache.delegate").getOrElse("-")} " +
      s"commitIntervalMs=${interval.getOrElse("-")} plugins=${if (plugins.isEmpty) "-" else plugins} " +
      s"sluiceStrategies=${sluiceStrategies.size} metrics=" +
      metrics.filterNot(_.contains(".partition_")).toSeq.sorted.mkString(","))

    val cache = metrics.contains("cacheHits")
    val rocksdb = metrics.exists(_.startsWith("rocksdb"))
    val windowStore = metrics.contains("windowStoreSegments")
    expect match {
      case "spark" =>
        assert(!cache && !windowStore && sluiceStrategies.isEmpty, "sluice is on in the baseline")
      case "cache-hdfs" => assert(cache && !rocksdb, s"not the record cache over HDFS: $metrics")
      case "cache-rocksdb" => assert(cache && rocksdb, s"not the record cache over RocksDB: $metrics")
      case "windowstore" => assert(windowStore && !cache, s"not the window store: $metrics")
      case other => fail(s"unknown sluice.probe.expect: $other")
    }
    if (expect != "spark") {
      assert(sluiceStrategies.nonEmpty, s"sluice's extensions are not in the session: $strategies")
      assert(plugins.contains("sluice.plugin.SluicePlugin"), s"spark.plugins=$plugins")
    }
    sys.props.get("sluice.probe.commitIntervalMs").foreach { ms =>
      assert(interval.contains(ms), s"spark.sluice.commit.interval.ms=$interval, expected $ms")
    }
  }
}
