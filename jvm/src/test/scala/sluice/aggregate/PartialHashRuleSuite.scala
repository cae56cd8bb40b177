package sluice.aggregate

import org.apache.spark.sql.DataFrame
import org.apache.spark.sql.catalyst.expressions.aggregate.Partial
import org.apache.spark.sql.execution.SortExec
import org.apache.spark.sql.execution.aggregate.{ObjectHashAggregateExec, SortAggregateExec}
import org.apache.spark.sql.functions.{col, count_distinct, first, max, struct, sum}

import sluice.PlanSuite
import sluice.aggregate.internal.PartialHashRule

/**
 * Partial aggregation by hash (`spark.sluice.aggregate.partial.hash`, [[PartialHashRule]]): the
 * map-side sort and sort aggregation Spark plans for a buffer its hash aggregation cannot hold (`max`
 * of a struct, Nexmark q7's highest bid) become one object-hash aggregation; the merge side, a global
 * aggregation (nothing sorted for it), a sort the query asked for (global, or by more than the keys)
 * and the setting off keep Spark's plan.
 */
class PartialHashRuleSuite extends PlanSuite {
  private val On = "spark.sluice.aggregate.partial.hash" -> "true"

  private def events: DataFrame = spark.range(40).selectExpr("id % 3 as k", "id as v", "id * 7 % 11 as w")

  private def highest: DataFrame = events.groupBy("k").agg(max(struct(col("w"), col("v"))).as("top"))

  test("rewrites the partial sort aggregation and its sort as an object-hash aggregation") {
    val plan = withConf(On)(highest.queryExecution.executedPlan)
    val byHash = nodes[ObjectHashAggregateExec](plan)
    assert(byHash.size == 1 && byHash.head.aggregateExpressions.forall(_.mode == Partial), plan)
    assert(nodes[SortExec](byHash.head).isEmpty, plan) // the sort Spark added for it is gone
    // the merge side after the shuffle is Spark's: a sort and a final sort aggregation
    val sortAggs = nodes[SortAggregateExec](plan)
    assert(sortAggs.size == 1 && sortAggs.head.requiredChildDistributionExpressions.nonEmpty, plan)
    assert(nodes[SortExec](plan).size == 1, plan)
  }

  test("Spark's plan with the setting off: a sort below each sort aggregation") {
    val plan = highest.queryExecution.executedPlan
    assert(nodes[ObjectHashAggregateExec](plan).isEmpty, plan)
    assert(nodes[SortAggregateExec](plan).size == 2 && nodes[SortExec](plan).size == 2, plan)
  }

  test("by hash and by sort give the same rows") {
    val bySort = sorted(highest.collect().toSeq)
    assert(bySort.size == 3 && withConf(On)(sorted(highest.collect().toSeq)) == bySort)
    val two = () => events.groupBy("k", "w").agg(max(struct(col("v"))), sum("v"))
    assert(withConf(On)(sorted(two().collect().toSeq)) == sorted(two().collect().toSeq))
  }

  test("leaves a global aggregation alone (no sort below it), saying why") {
    val global = () => events.select(struct(col("w"), col("v")).as("s")).agg(max("s"))
    val (plan, lines) = logged(withConf(On)(shape(global())))
    assert(plan == shape(global()))
    assert(lines.size == 1 && lines.head.endsWith(PartialHashRule.Why.NoSort), lines)
  }

  test("with a distinct aggregate: rewrites the plain partial layer, leaves the distinct one alone, saying why") {
    // Spark plans two map-side layers: partial_max by (k, w), then merge_max and partial_count(distinct w) by k
    val distinct = () => events.groupBy("k").agg(max(struct(col("w"), col("v"))), count_distinct(col("w")))
    val (plan, lines) = logged(withConf(On)(distinct().queryExecution.executedPlan))
    val byHash = nodes[ObjectHashAggregateExec](plan)
    assert(byHash.size == 1 && byHash.head.groupingExpressions.map(_.name) == Seq("k", "w"), plan)
    assert(nodes[SortAggregateExec](plan).exists(_.aggregateExpressions.exists(_.isDistinct)), plan)
    assert(lines.size == 1 && lines.head.endsWith(PartialHashRule.Why.NotAllPartial), lines)
    assert(withConf(On)(sorted(distinct().collect().toSeq)) == sorted(distinct().collect().toSeq))
  }

  // An aggregate function whose result depends on the order of its rows (`first`) keeps the sorts below
  // the aggregation, so Spark adds none: the partial sort aggregation reads the order the query sorted.
  private def highestAfter(ordered: DataFrame): DataFrame =
    ordered.groupBy("k").agg(max(struct(col("w"), col("v"))).as("top"), first("k").as("first"))

  test("leaves a partial sort aggregation over a global sort alone, saying why, with Spark's rows") {
    // by more than the keys: a global sort by the keys alone partitions the rows by them, and Spark
    // aggregates them in one phase, with no partial aggregation
    val overGlobal = () => highestAfter(events.orderBy("k", "w"))
    val (plan, lines) = logged(withConf(On)(shape(overGlobal())))
    assert(plan == shape(overGlobal()))
    assert(lines.size == 1 && lines.head.endsWith(PartialHashRule.Why.GlobalSort), lines)
    assert(withConf(On)(sorted(overGlobal().collect().toSeq)) == sorted(overGlobal().collect().toSeq))
  }

  test("leaves a partial sort aggregation over a sort by more than its keys alone, saying why, with Spark's rows") {
    val overOther = () => highestAfter(events.sortWithinPartitions("k", "w"))
    val (plan, lines) = logged(withConf(On)(shape(overOther())))
    assert(plan == shape(overOther()))
    assert(lines.size == 1 && lines.head.endsWith(PartialHashRule.Why.OtherOrder), lines)
    assert(withConf(On)(sorted(overOther().collect().toSeq)) == sorted(overOther().collect().toSeq))
  }

  test("leaves hash aggregations alone, silently: nothing sorted to save") {
    val summed = () => events.groupBy("k").agg(sum("v"))
    val (plan, lines) = logged(withConf(On)(shape(summed())))
    assert(plan == shape(summed()) && lines.isEmpty, lines)
  }
}
