package sluice.cache

import java.sql.Timestamp

import org.apache.spark.sql.DataFrame
import org.apache.spark.sql.execution.SparkPlan
import org.apache.spark.sql.execution.streaming.runtime.MemoryStream
import org.apache.spark.sql.functions.{col, count, window}

import sluice.PlanSuite
import sluice.cache.internal.{EmitCacheExec, EmitCacheNode, EmitCacheSkippedExec}
import sluice.spark.PlanTypes.StateStoreSaveExec
import sluice.suppress.{BufferConfig, Suppress, Suppressed}

/**
 * The emission cache (`EmitCacheRule` in the optimizer, `EmitCacheStrategy` in the planner): with
 * `spark.sluice.commit.interval.ms` > 0, an update-mode query whose last stateful operator is a
 * streaming aggregation gets an [[EmitCacheExec]] right above it. With the interval 0 (the default),
 * in a batch query, and where the cache cannot go (another output mode, a stateful operator above the
 * aggregation) the plan has none; the last two show an [[EmitCacheSkippedExec]] saying why.
 */
class EmitCacheRuleSuite extends PlanSuite {
  private val Interval = "spark.sluice.commit.interval.ms" -> "60000"

  private def events(input: MemoryStream[(String, Timestamp)]): DataFrame =
    input.toDF().toDF("k", "ts").withWatermark("ts", "5 seconds")

  /** The last micro-batch's plan of `query` over one batch of three events, with `conf`. */
  private def planned(mode: String, conf: (String, String)*)(query: DataFrame => DataFrame): SparkPlan = {
    val s = spark
    import s.implicits._
    implicit val sqlContext: org.apache.spark.sql.SQLContext = spark.sqlContext
    val input = MemoryStream[(String, Timestamp)]
    val batch = () => input.addData(("a", new Timestamp(1000)), ("a", new Timestamp(2000)), ("b", new Timestamp(3000)))
    withConf(conf: _*)(lastBatch(query(events(input)), mode)(Seq(batch)))._1.executedPlan
  }

  private val counts: DataFrame => DataFrame = _.groupBy("k").agg(count("*").as("n"))
  private val windowed: DataFrame => DataFrame =
    _.groupBy(window(col("ts"), "10 seconds"), col("k")).agg(count("*").as("n"))

  test("rewrites an update-mode aggregation's output: the emission cache right above the aggregation") {
    val plan = planned("update", Interval)(counts)
    val cache = nodes[EmitCacheExec](plan)
    assert(cache.size == 1 && cache.head.intervalMs == 60000L, plan)
    assert(cache.head.keys.map(_.name) == Seq("k"), plan)
    assert(nodes[StateStoreSaveExec](cache.head).size == 1, plan) // the aggregation is below it
    assert(nodes[EmitCacheSkippedExec](plan).isEmpty, plan)
  }

  test("rewrites an aggregation the optimizer folded a projection into, splitting it again") {
    val plan = planned("update", Interval)(df => counts(df).selectExpr("k", "n * 2 as twice"))
    assert(nodes[EmitCacheExec](plan).size == 1, plan)
  }

  test("leaves the plan alone with the interval 0 (the default)") {
    val plan = planned("update")(counts)
    assert(nodes[EmitCacheExec](plan).isEmpty && nodes[EmitCacheSkippedExec](plan).isEmpty, plan)
  }

  test("leaves a batch query alone") {
    val batch = withConf(Interval)(spark.range(5).selectExpr("id % 2 as k").groupBy("k").count().queryExecution)
    assert(!batch.optimizedPlan.exists(_.isInstanceOf[EmitCacheNode]), batch.optimizedPlan)
    assert(nodes[EmitCacheSkippedExec](batch.executedPlan).isEmpty)
  }

  test("skips the cache in append mode, saying why") {
    val plan = planned("append", Interval)(windowed)
    val skipped = nodes[EmitCacheSkippedExec](plan)
    assert(nodes[EmitCacheExec](plan).isEmpty && skipped.size == 1, plan)
    assert(skipped.head.reason.startsWith("the output mode is Append"), skipped.head.reason)
  }

  test("skips the cache below suppress, saying why") {
    val plan = planned("update", Interval)(df =>
      Suppress(windowed(df),
        Suppressed.untilWindowCloses(
          BufferConfig.unbounded())))
    val skipped = nodes[EmitCacheSkippedExec](plan)
    assert(nodes[EmitCacheExec](plan).isEmpty && skipped.size == 1, plan)
    assert(skipped.head.reason.startsWith("the query ends in suppress"), skipped.head.reason)
  }

  test("skips the cache above a deduplication, saying why") {
    val plan = planned("update", Interval)(df => counts(df).dropDuplicates("k", "n"))
    val skipped = nodes[EmitCacheSkippedExec](plan)
    assert(nodes[EmitCacheExec](plan).isEmpty && skipped.size == 1, plan)
    assert(skipped.head.reason.contains("is not an aggregation"), skipped.head.reason)
  }
}
