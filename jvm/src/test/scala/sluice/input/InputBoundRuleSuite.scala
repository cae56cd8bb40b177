package sluice.input

import java.nio.file.Files

import org.apache.spark.sql.DataFrame
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.catalyst.streaming.StreamingRelationV2
import org.apache.spark.sql.execution.streaming.runtime.MemoryStream

import sluice.PlanSuite
import sluice.conf.SluiceConfException
import sluice.input.internal.{BoundedDataSource, BoundedTable, Budget}
import sluice.spark.SourceTypes.StreamingRelation

/**
 * The input bound (`InputBoundRule`, an analyzer rule, always on): every streaming rate, Kafka and
 * file source of a query is wrapped ([[BoundedTable]], [[BoundedDataSource]]) so that one micro-batch
 * admits at most `spark.sluice.input.buffer.max.bytes`; other sources (memory) and batch reads stay
 * Spark's. (The Kafka source, and why it keeps Spark's reader, is in ExperimentalRewritesSuite.)
 */
class InputBoundRuleSuite extends PlanSuite {

  private def tables(plan: LogicalPlan) = plan.collect { case r: StreamingRelationV2 => r.table }
  private def fileSources(plan: LogicalPlan) = plan.collect { case r: StreamingRelation => r.dataSource }

  test("bounds a streaming rate source") {
    val plan = spark.readStream.format("rate").option("rowsPerSecond", "10").load().queryExecution.analyzed
    val bounded = tables(plan)
    assert(bounded.size == 1 && bounded.head.isInstanceOf[BoundedTable], plan)
  }

  test("bounds a streaming file source") {
    val dir = tempDir("sluice-input")
    val plan = spark.readStream.schema("a long").json(dir.toString).queryExecution.analyzed
    val sources = fileSources(plan)
    assert(sources.size == 1 && sources.head.isInstanceOf[BoundedDataSource], plan)
  }

  test("bounds each source of a union once") {
    val rate = () => spark.readStream.format("rate").load()
    val plan = rate().union(rate()).queryExecution.analyzed
    assert(tables(plan).size == 2 && tables(plan).forall(_.isInstanceOf[BoundedTable]), plan)
    assert(!tables(plan).exists {
        case b: BoundedTable => b.inner.isInstanceOf[BoundedTable]
        case _ => false
      }, plan)
  }

  test("refuses a source's byte bound that is not a byte size") {
    val e = intercept[SluiceConfException] {
      spark.readStream.format("rate").option(Budget.SourceOption, "lots").load().queryExecution.analyzed
    }
    assert(e.getMessage.contains(s"Invalid value 'lots' for source option ${Budget.SourceOption}"), e.getMessage)
  }

  test("leaves a memory source and batch reads alone") {
    val s = spark
    import s.implicits._
    implicit val sqlContext: org.apache.spark.sql.SQLContext = spark.sqlContext
    val memory = MemoryStream[Long].toDF().queryExecution.analyzed
    assert(!tables(memory).exists(_.isInstanceOf[BoundedTable]) && fileSources(memory).isEmpty, memory)
    val dir = tempDir("sluice-input")
    Files.writeString(dir.resolve("a.json"), "{\"a\": 1}\n")
    val batch: DataFrame = spark.read.schema("a long").json(dir.toString)
    assert(batch.queryExecution.analyzed.toString.indexOf("Bounded") < 0, batch.queryExecution.analyzed)
    assert(batch.collect().map(_.getLong(0)).toSeq == Seq(1L))
  }
}
