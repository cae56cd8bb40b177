package org.apache.spark.sql.sluicetest

import java.nio.charset.StandardCharsets
import java.nio.file.Files

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.QueryTest
import org.apache.spark.sql.functions.{col, window}
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.streaming.Trigger
import org.apache.spark.sql.test.SharedSparkSession

/**
 * dev/spark-suites' check that a configuration given as `spark.*` JVM system properties reaches the
 * sessions Spark's own suites run in (SharedSparkSession's TestSparkSession): runs one stateful query
 * and looks at the provider that served it (its custom metrics), the session's planner strategies
 * (sluice's extensions) and the plugin setting. `-Dsluice.probe.expect=` names what must be found:
 * `spark` (Spark's default provider, no sluice), `cache-hdfs`, `cache-rocksdb`, `windowstore`,
 * `rewrites` (Spark's default provider, window slicing, partial aggregation by hash and sliced state on:
 * a batch sliding-window count must run sliced, and a streaming one in append mode keep its state per slice);
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
      case "rewrites" =>
        assert(!cache && !windowStore, s"not Spark's own provider: $metrics")
        val sliding = spark.range(100).selectExpr("timestamp_seconds(id) as ts")
          .groupBy(window(col("ts"), "10 seconds", "5 seconds")).count()
        assert(sliding.collect().map(_.getLong(1)).sum == 200, "a sliding-window count lost rows")
        // merge_count: the partial merge of the sliced map side (unsliced, a count is partial or final)
        val plan = sliding.queryExecution.executedPlan.toString
        assert(plan.contains("merge_count"), s"window slicing did not reach the session: $plan")
        slicedState(dir)
        println(s"sluice-probe: rewrites slicing=${spark.conf.get("spark.sluice.window.slicing")} " +
          s"partialHash=${spark.conf.get("spark.sluice.aggregate.partial.hash")} " +
          s"slicedState=${spark.conf.get("spark.sluice.window.slicing.state")} " +
          s"stateMerge=${spark.conf.get("spark.sluice.aggregate.state.merge")}")
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

  /**
   * Sliced state in Spark's test session: a streaming sliding-window count per key in append mode
   * runs sluice's sliced operator, pins it in its checkpoint, and emits the windows its watermark
   * closes (the no-data batch Trigger.AvailableNow runs before it stops).
   */
  private def slicedState(dir: java.nio.file.Path): Unit = {
    val in = Files.createDirectories(dir.resolve("sliced-in"))
    // (seconds, key): windows of 10 s every 5 s; the watermark (no delay) ends at 40
    val events = Seq(1 -> "a", 2 -> "a", 6 -> "b", 12 -> "a", 40 -> "a")
    Files.write(in.resolve("part-0.json"), events.map { case (t, k) => s"""{"t": $t, "k": "$k"}""" }.asJava,
      StandardCharsets.UTF_8)
    val ckpt = dir.resolve("sliced-ckpt")
    val q = spark.readStream.schema("t long, k string").json(in.toString)
      .selectExpr("timestamp_seconds(t) as ts", "k").withWatermark("ts", "0 seconds")
      .groupBy(window(col("ts"), "10 seconds", "5 seconds"), col("k")).count()
      .writeStream.format("memory").queryName("sluice_probe_sliced").outputMode("append")
      .option("checkpointLocation", ckpt.toString).trigger(Trigger.AvailableNow()).start()
    q.awaitTermination()
    val operators = q.recentProgress.flatMap(_.stateOperators.map(_.operatorName)).toSet
    assert(operators == Set("slicedWindowAggregate"), s"sliced state did not reach the session: $operators")
    assert(Files.exists(ckpt.resolve("state/0/_sluice_sliced_state")), "no sliced-state marker in the checkpoint")
    val got = spark.table("sluice_probe_sliced").selectExpr("k", "cast(window.start as long)", "count").collect()
      .map(r => (r.getString(0), r.getLong(1), r.getLong(2))).toSet
    val expected = Set(("a", -5L, 2L), ("a", 0L, 2L), ("a", 5L, 1L), ("a", 10L, 1L), ("b", 0L, 1L), ("b", 5L, 1L))
    assert(got == expected, s"sliced state's final counts: $got, expected $expected")
  }
}
