package sluice.json

import org.apache.spark.sql.{Column, DataFrame}
import org.apache.spark.sql.catalyst.expressions.JsonToStructs
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.functions.{col, from_json}
import org.apache.spark.sql.types.{LongType, StringType, StructField, StructType}

import sluice.PlanSuite
import sluice.json.internal.DirectJsonToStructs

/**
 * The JSON decoder (`spark.sluice.json.decoder=sluice`, `JsonDecodeRule`, an optimizer rule): each
 * `from_json` it supports becomes [[DirectJsonToStructs]] in the optimized plan; a `from_json` with
 * options, of a non-string input, and every one with the setting at Spark's default stay Spark's.
 * (JsonDecodeSuite checks the decoded values field by field.)
 */
class JsonDecodeRuleSuite extends PlanSuite {
  private val On = "spark.sluice.json.decoder" -> "sluice"
  private val schema = StructType(Seq(StructField("a", LongType), StructField("b", StringType)))

  private def records: DataFrame = spark.range(5).selectExpr(
    "case when id = 3 then 'not json' else concat('{\"a\": ', id, ', \"b\": \"x', id, '\"}') end as value")

  private def decoded(c: Column): DataFrame = records.select(c.as("j")).select(col("j.a"), col("j.b"))

  private def decoders(plan: LogicalPlan): (Int, Int) = {
    val exprs = plan.flatMap(_.expressions)
    (exprs.map(_.collect { case d: DirectJsonToStructs => d }.size).sum,
      exprs.map(_.collect { case j: JsonToStructs => j }.size).sum)
  }

  test("rewrites a supported from_json as sluice's decoder in the optimized plan") {
    val plan = withConf(On)(decoded(from_json(col("value"), schema)).queryExecution.optimizedPlan)
    // Spark's expression stays inside sluice's (malformed records go to it), but none is left outside
    val direct = plan.flatMap(_.expressions).flatMap(_.collect { case d: DirectJsonToStructs => d })
    assert(direct.size == 1, plan)
    assert(direct.head.decoded.fieldNames.toSeq == Seq("a", "b"), plan)
    // no from_json of Spark's is left in the plan (sluice's holds one as a field, for malformed records)
    assert(decoders(plan) == (1, 0), plan)
  }

  test("Spark's from_json with the setting at its default") {
    val plan = decoded(from_json(col("value"), schema)).queryExecution.optimizedPlan
    val (direct, sparks) = decoders(plan)
    assert(direct == 0 && sparks >= 1, plan)
  }

  test("decoded and parsed give the same rows, a malformed record included") {
    val parsed = sorted(decoded(from_json(col("value"), schema)).collect().toSeq)
    assert(parsed.size == 5 && parsed.contains("[null,null]"), parsed)
    assert(withConf(On)(sorted(decoded(from_json(col("value"), schema)).collect().toSeq)) == parsed)
  }

  test("leaves a from_json with options to Spark's parser, saying why") {
    val withOptions = () => decoded(from_json(col("value"), schema, Map("allowComments" -> "true")))
    val (plan, lines) = logged(withConf(On)(withOptions().queryExecution.optimizedPlan))
    assert(decoders(plan)._1 == 0, plan)
    assert(lines.size == 1 && lines.head.endsWith(DirectJsonToStructs.Why.options(Seq("allowComments"))), lines)
  }

  test("leaves a from_json whose schema has Spark's corrupt-record column to Spark's parser, saying why") {
    val corrupt = StructType(schema.fields :+ StructField("_corrupt_record", StringType))
    val (kept, lines) = logged(withConf(On)(decoded(from_json(col("value"), corrupt)).queryExecution.optimizedPlan))
    assert(decoders(kept)._1 == 0, kept)
    assert(lines.size == 1 && lines.head.endsWith(DirectJsonToStructs.Why.corruptRecord("_corrupt_record")), lines)
  }

  test("rewrites from_json in a streaming query's micro-batch plan too") {
    import org.apache.spark.sql.execution.streaming.runtime.MemoryStream
    val s = spark
    import s.implicits._
    implicit val sqlContext: org.apache.spark.sql.SQLContext = spark.sqlContext
    val input = MemoryStream[String]
    val query = input.toDF().select(from_json(col("value"), schema).as("j")).select(col("j.a"))
    val (exec, rows) = withConf(On)(lastBatch(query, "append")(Seq(() => input.addData("{\"a\": 7}", "{\"a\": 8}"))))
    assert(decoders(exec.optimizedPlan)._1 == 1, exec.optimizedPlan)
    assert(rows.map(_.getLong(0)).sorted == Seq(7L, 8L))
  }
}
