package sluice.slicing

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.DataFrame
import org.apache.spark.sql.catalyst.expressions.aggregate.{Partial, PartialMerge}
import org.apache.spark.sql.execution.{ExpandExec, InputAdapter, SparkPlan, WholeStageCodegenExec}
import org.apache.spark.sql.execution.streaming.runtime.MemoryStream
import org.apache.spark.sql.execution.aggregate.HashAggregateExec
import org.apache.spark.sql.functions.{col, count, count_distinct, max, sum, window}

import sluice.PlanSuite
import sluice.slicing.internal.SlicingRule

/**
 * Window slicing (`spark.sluice.window.slicing`, [[SlicingRule]]) on batch plans: the map side of a
 * sliding-window aggregation aggregates per (first window, keys), then forms the windows, then merges;
 * tumbling windows, a slide that does not divide the size, the setting off, and each aggregation by a
 * window that the rule leaves alone (with why: [[SlicingRule.Why]]) keep Spark's plan.
 */
class WindowSlicingRuleSuite extends PlanSuite {
  private val On = "spark.sluice.window.slicing" -> "true"

  private def events: DataFrame =
    spark.range(40).selectExpr("timestamp_seconds(id * 3) as ts", "id % 3 as k", "id as v")

  private def byWindow(size: String, slide: String): DataFrame =
    events.groupBy(window(col("ts"), size, slide), col("k")).agg(count("*").as("n"), sum("v").as("s"), max("v"))

  // The operator below `p`, past the whole-stage code generation wrappers.
  private def below(p: SparkPlan): SparkPlan = p.children.head match {
    case w: WholeStageCodegenExec => below(w)
    case i: InputAdapter => below(i)
    case c => c
  }

  test("rewrites a sliding-window aggregation's map side: per slice, then the windows, then a merge") {
    val plan = withConf(On)(byWindow("10 seconds", "5 seconds").queryExecution.executedPlan)
    val aggs = nodes[HashAggregateExec](plan)
    // Spark's: the final aggregation and the partial one over the windows' Expand
    val merge = aggs.filter(a =>
      a.requiredChildDistributionExpressions.isEmpty &&
      a.aggregateExpressions.forall(_.mode == PartialMerge))
    assert(merge.size == 1, plan)
    val expand = below(merge.head)
    assert(expand.isInstanceOf[ExpandExec], plan)
    below(expand) match {
      case perSlice: HashAggregateExec => assert(perSlice.aggregateExpressions.forall(_.mode == Partial), plan)
      case other => fail(s"no per-slice aggregation below the windows' Expand, but ${other.nodeName}: $plan")
    }
    assert(aggs.size == 3, plan)
  }

  test("Spark's plan: the windows' Expand directly below the partial aggregation, with the setting off") {
    val plan = byWindow("10 seconds", "5 seconds").queryExecution.executedPlan
    val aggs = nodes[HashAggregateExec](plan)
    assert(aggs.size == 2 && !aggs.exists(_.aggregateExpressions.exists(_.mode == PartialMerge)), plan)
    val partial = aggs.find(_.aggregateExpressions.forall(_.mode == Partial)).get
    assert(below(partial).isInstanceOf[ExpandExec], plan)
  }

  test("sliced and unsliced give the same windows, counts and sums") {
    Seq(("10 seconds", "5 seconds"), ("12 seconds", "3 seconds"), ("9 seconds", "9 seconds")).foreach {
      case (size, slide) =>
        val spark = sorted(byWindow(size, slide).collect().toSeq)
        val sliced = withConf(On)(sorted(byWindow(size, slide).collect().toSeq))
        assert(spark.nonEmpty && sliced == spark, s"$size / $slide")
    }
  }

  test("leaves tumbling windows alone, saying why") {
    val unsliced = shape(byWindow("10 seconds", "10 seconds"))
    val (sliced, lines) = logged(withConf(On)(shape(byWindow("10 seconds", "10 seconds"))))
    assert(sliced == unsliced)
    assert(lines.size == 1 && lines.head.endsWith(SlicingRule.Why.Tumbling), lines)
  }

  test("leaves a slide that does not divide the size alone, saying why") {
    val unsliced = shape(byWindow("10 seconds", "3 seconds"))
    val (sliced, lines) = logged(withConf(On)(shape(byWindow("10 seconds", "3 seconds"))))
    assert(sliced == unsliced)
    assert(lines.size == 1 && lines.head.endsWith(SlicingRule.Why.SlideNotDividingSize), lines)
  }

  test("leaves an aggregation reading a renamed window column alone, saying why, with Spark's rows") {
    // the windows formed in a projection (renamed there), so that the aggregation can read the column:
    // slicing would give it each slice's first window
    val readsWindow = () =>
      events.select(window(col("ts"), "10 seconds", "5 seconds").as("w"), col("k"))
        .groupBy(col("w"), col("k")).agg(max(col("w.start")))
    val unsliced = shape(readsWindow())
    val (sliced, lines) = logged(withConf(On)(shape(readsWindow())))
    assert(sliced == unsliced)
    assert(lines.size == 1 && lines.head.endsWith(SlicingRule.Why.ProjectionReadsWindow), lines)
    assert(withConf(On)(sorted(readsWindow().collect().toSeq)) == sorted(readsWindow().collect().toSeq))
  }

  /**
   * `query` (a builder, called once per planning) planned with the setting on: its plan is Spark's and
   * the rule logs one line, ending in `why`; its rows are Spark's.
   */
  private def leftAlone(query: () => DataFrame, why: String): Unit = {
    val (sliced, lines) = logged(withConf(On)(shape(query())))
    assert(sliced == shape(query()))
    assert(lines.size == 1 && lines.head.endsWith(why), lines)
    assert(withConf(On)(sorted(query().collect().toSeq)) == sorted(query().collect().toSeq))
  }

  test("leaves an aggregation by a window column read from data alone, saying why, with Spark's rows") {
    // windowed results kept as rows and aggregated again: no windows of Spark's below the aggregation
    val windowed = byWindow("10 seconds", "10 seconds").select(col("window").as("w"), col("k"), col("n"))
    val kept = windowed.collect().toSeq.asJava
    leftAlone(() => spark.createDataFrame(kept, windowed.schema).groupBy(col("w")).agg(sum("n")),
      SlicingRule.Why.NoWindows)
  }

  test("leaves an aggregation over another Expand than the windows' (a rollup) alone, saying why, with Spark's rows") {
    leftAlone(
      () =>
        events.select(window(col("ts"), "10 seconds").as("w"), col("k"), col("v")).rollup(col("w"), col("k"))
          .agg(sum("v")),
      SlicingRule.Why.NotSparksWindows)
  }

  test("leaves an aggregation by another window than the sliding ones below it alone, saying why, with Spark's rows") {
    // grouped by a tumbling window, counting the sliding windows the Expand below forms (the whole
    // column: a field of it would be read in a projection between them)
    leftAlone(
      () =>
        events.select(window(col("ts"), "20 seconds").as("t"), col("ts"), col("k"))
          .select(window(col("ts"), "10 seconds", "5 seconds"), col("t"), col("k"))
          .groupBy(col("t"), col("k")).agg(count(col("window"))),
      SlicingRule.Why.NotByTheWindows)
  }

  test("leaves an aggregation by the windows that reads them in a function alone, saying why, with Spark's rows") {
    leftAlone(
      () =>
        events.select(window(col("ts"), "10 seconds", "5 seconds"), col("k"), col("v"))
          .groupBy(col("window"), col("k")).agg(max(col("window.start")), sum("v")),
      SlicingRule.Why.WindowReadElsewhere)
  }

  test("with a distinct aggregate: slices the plain partial layer, leaves the distinct one alone, saying why") {
    // Spark plans two map-side layers: by (window, k, v) with no function over the windows' Expand, then
    // the merge of its rows and partial_count(distinct v) by (window, k)
    val distinct = () =>
      events.groupBy(window(col("ts"), "10 seconds", "5 seconds"), col("k"))
        .agg(count_distinct(col("v")).as("d"))
    val (plan, lines) = logged(withConf(On)(distinct().queryExecution.executedPlan))
    assert(nodes[HashAggregateExec](plan).exists(_.aggregateExpressions.exists(_.isDistinct)), plan)
    // the plain layer sliced: its rows merged by (window, k, v) over the windows formed from the slices
    assert(
      nodes[HashAggregateExec](plan).exists(a =>
        a.requiredChildDistributionExpressions.isEmpty && a.aggregateExpressions.isEmpty &&
        below(a).isInstanceOf[ExpandExec] && below(below(a)).isInstanceOf[HashAggregateExec]), plan)
    assert(lines.size == 1 && lines.head.endsWith(SlicingRule.Why.NotAllPartial), lines)
    assert(withConf(On)(sorted(distinct().collect().toSeq)) == sorted(distinct().collect().toSeq))
  }

  test("rewrites a streaming micro-batch's map side too, with the same updates") {
    val s = spark
    import s.implicits._
    implicit val sqlContext: org.apache.spark.sql.SQLContext = spark.sqlContext
    def run(conf: (String, String)*) = {
      val input = MemoryStream[(Long, Long)]
      val query = input.toDF().selectExpr("timestamp_seconds(_1) as ts", "_2 as k").withWatermark("ts", "30 seconds")
        .groupBy(window(col("ts"), "10 seconds", "5 seconds"), col("k")).agg(count("*").as("n"))
      val (exec, rows) = withConf(conf: _*)(lastBatch(query, "update")(Seq(
            () => input.addData((1L, 1L), (4L, 1L), (6L, 2L)),
            () => input.addData((7L, 1L), (13L, 2L)))))
      (exec.executedPlan, rows)
    }
    val (sliced, slicedRows) = run(On)
    // the map side's aggregations (a streaming plan also merges after the shuffle and around the state)
    def mapSideMerges(plan: SparkPlan) = nodes[HashAggregateExec](plan)
      .filter(a =>
        a.requiredChildDistributionExpressions.isEmpty && a.aggregateExpressions.exists(_.mode == PartialMerge))
    assert(mapSideMerges(sliced).size == 1 && below(mapSideMerges(sliced).head).isInstanceOf[ExpandExec], sliced)
    val (unsliced, sparkRows) = run()
    assert(mapSideMerges(unsliced).isEmpty, unsliced)
    assert(sparkRows.nonEmpty && sorted(slicedRows) == sorted(sparkRows))
  }

  test("leaves aggregations without a window column alone, silently") {
    val plain = () => events.groupBy(col("k")).agg(sum("v"))
    val (sliced, lines) = logged(withConf(On)(shape(plain())))
    assert(sliced == shape(plain()) && lines.isEmpty, lines)
  }
}
