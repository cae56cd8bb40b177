package sluice.plugin

import org.apache.spark.sql.{DataFrame, SparkSession}
import org.apache.spark.sql.functions.{col, concat, from_json, lit}
import org.apache.spark.sql.types.{LongType, StructField, StructType}
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

import sluice.json.internal.JsonDecodeRule

/**
 * The experimental rewrite, switched on, names each plan it examines and leaves alone, with why: one
 * INFO line per plan through `sluice.rewrites`, captured by [[sluice.RewritesLog]].
 */
class ExperimentalRewritesSuite extends AnyFunSuite with BeforeAndAfterAll {
  private var spark: SparkSession = _

  override def beforeAll(): Unit = {
    spark = SparkSession.builder().master("local[2]").appName("ExperimentalRewritesSuite")
      .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
      .config("spark.sql.adaptive.enabled", "false")
      .config("spark.sql.extensions", "sluice.plugin.SluiceExtensions").getOrCreate()
  }

  override def afterAll(): Unit = if (spark != null) spark.stop()

  /** The "LEVEL message" lines `sluice.rewrites` logs while `body` runs. */
  private def logged(body: => Unit): Seq[String] = sluice.RewritesLog.capture(body)._2

  private def withConf[T](kv: (String, String)*)(body: => T): T = {
    kv.foreach { case (k, v) => spark.conf.set(k, v) }
    try body
    finally kv.foreach { case (k, _) => spark.conf.unset(k) }
  }

  private def planned(df: DataFrame): String = df.queryExecution.executedPlan.toString

  test("the JSON decoder names a from_json it leaves to Spark's parser, once however often the optimizer meets it") {
    val schema = StructType(Seq(StructField("a", LongType)))
    // one projection (two would be collapsed into one while the optimizer runs the rule)
    val withOptions = spark.range(3)
      .select(from_json(concat(lit("{\"a\": "), col("id"), lit("}")), schema, Map("mode" -> "PERMISSIVE")).getField(
          "a"))
    val lines = logged(withConf("spark.sluice.json.decoder" -> "sluice")(planned(withOptions)))
    assert(lines.size == 1, lines)
    assert(lines.head.startsWith(s"INFO sluice: ${JsonDecodeRule.Name} did not apply to from_json(concat("), lines)
    assert(lines.head.endsWith(s", struct<a:bigint>): it has options (mode), which only Spark's parser reads"), lines)
    assert(withConf("spark.sluice.json.decoder" -> "sluice")(withOptions.collect().map(_.getLong(0)).toSeq) == Seq(0L,
      1L, 2L))
  }
}
