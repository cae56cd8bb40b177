package sluice.suppress

import java.sql.Timestamp

import org.apache.spark.sql.Row
import org.apache.spark.sql.execution.SparkPlan
import org.apache.spark.sql.execution.streaming.runtime.{MemoryStream, StreamingQueryWrapper}
import org.apache.spark.sql.functions.{col, count, window}
import org.apache.spark.sql.sluice.StatefulOperatorSupport
import org.apache.spark.sql.streaming.OutputMode

import sluice.PlanSuite
import sluice.spark.PlanTypes.StateStoreSaveExec
import sluice.suppress.internal.{LateRecordsCounted, LateRecordsExec, SuppressExec, SuppressNode, SuppressStrategy}

/**
 * Suppress (`SuppressStrategy`): `Suppress(df, ...)` puts a [[SuppressNode]] in the plan, planned as
 * a [[SuppressExec]] over the aggregation, or, for an unbounded `untilWindowCloses` directly over the
 * query's only windowed aggregation with `spark.sluice.suppress.fused` on (its default), as that
 * aggregation alone with Spark's append-mode state save (fused final results, FusedFinal). A bounded
 * buffer, a time limit, a grace below the watermark delay, and the setting off run unfused.
 */
class SuppressStrategySuite extends PlanSuite {
  private val Unfused = "spark.sluice.suppress.fused" -> "false"

  /** Counts per 10-second window and key (watermark 5 seconds behind), suppressed by `suppressed`. */
  private def run(suppressed: Suppressed, delay: String = "5 seconds", timeCol: Option[String] = None,
      lateBatch: Boolean = false)(conf: (String,
          String)*): (SparkPlan, Seq[Row]) = {
    val s = spark
    import s.implicits._
    implicit val sqlContext: org.apache.spark.sql.SQLContext = spark.sqlContext
    val input = MemoryStream[(String, Timestamp)]
    val counts = input.toDF().toDF("k", "ts").withWatermark("ts", delay)
      .groupBy(window(col("ts"), "10 seconds"), col("k")).agg(count("*").as("n"))
    val query = timeCol.fold(Suppress(counts, suppressed))(Suppress(counts, suppressed, _))
    assert(query.queryExecution.analyzed.exists(_.isInstanceOf[SuppressNode]))
    def at(k: String, sec: Long) = (k, new Timestamp(sec * 1000))
    val (exec, rows) = withConf(conf: _*)(lastBatch(query, "update")(Seq(
        () => input.addData(at("a", 1), at("a", 2), at("b", 3)),
        () => input.addData(at("a", 12)),
        // the watermark passes 10 s: window [0, 10) closes
        () => input.addData(at("b", 21))) ++ (if (lateBatch) Seq(() => input.addData(at("a", 4))) else Nil)))
    (exec.executedPlan, rows)
  }

  private val untilClosed = Suppressed.untilWindowCloses(BufferConfig.unbounded())

  test("fuses an unbounded untilWindowCloses into the windowed aggregation: no suppress operator") {
    val (plan, rows) = run(untilClosed)()
    assert(nodes[SuppressExec](plan).isEmpty, plan)
    val saves = nodes[StateStoreSaveExec](plan)
    assert(saves.size == 1 && saves.head.outputMode.contains(OutputMode.Append()), plan)
    // the closed window [0, 10), once per key
    assert(rows.map(r => (r.getAs[String]("k"), r.getAs[Long]("n"))).sorted == Seq(("a", 2L), ("b", 1L)), rows)
  }

  test("runs unfused with spark.sluice.suppress.fused off: the suppress operator over Spark's update-mode save") {
    val (plan, rows) = run(untilClosed)(Unfused)
    val suppress = nodes[SuppressExec](plan)
    assert(suppress.size == 1, plan)
    val saves = nodes[StateStoreSaveExec](suppress.head)
    assert(saves.size == 1 && saves.head.outputMode.contains(OutputMode.Update()), plan)
    // the same final results as fused
    assert(sorted(rows) == sorted(run(untilClosed)()._2))
  }

  test("leaves a bounded buffer unfused") {
    val (plan, rows) = run(Suppressed.untilWindowCloses(BufferConfig.maxRecords(100).shutDownWhenFull()))()
    assert(nodes[SuppressExec](plan).size == 1, plan)
    assert(rows.map(r => (r.getAs[String]("k"), r.getAs[Long]("n"))).sorted == Seq(("a", 2L), ("b", 1L)), rows)
  }

  test("leaves a grace period below the watermark delay unfused") {
    val (plan, _) = run(Suppressed.untilWindowCloses(BufferConfig.unbounded(), 1000L), delay = "5 seconds")()
    assert(nodes[SuppressExec](plan).size == 1, plan)
  }

  test("late records: kept below the aggregation, on the fused and the unfused plan, and written") {
    def lateRecords(conf: (String, String)*) = {
      val dir = tempDir("sluice-late").resolve("late").toString
      val until = Suppressed.untilWindowCloses(BufferConfig.unbounded()).withLateRecords(dir, "json")
      // a fourth batch with a record of the closed window [0, 10)
      val (plan, _) = run(until, lateBatch = true)(conf: _*)
      (plan, dir)
    }
    val (fused, fusedDir) = lateRecords()
    assert(nodes[SuppressExec](fused).isEmpty, fused)
    assert(nodes[LateRecordsCounted](fused).size == 1 && nodes[LateRecordsExec](fused).size == 1, fused)
    val (unfused, unfusedDir) = lateRecords(Unfused)
    val suppress = nodes[SuppressExec](unfused)
    assert(suppress.size == 1 && nodes[LateRecordsExec](suppress.head).size == 1, unfused)
    // below the aggregation: under its state save
    assert(nodes[StateStoreSaveExec](unfused).forall(s => nodes[LateRecordsExec](s).size == 1), unfused)
    Seq(fusedDir, unfusedDir).foreach { dir =>
      val late = spark.read.option("recursiveFileLookup", "true").json(dir)
      assert(late.count() == 1, dir)
    }
  }

  private def counts(input: MemoryStream[(String, Timestamp)]) = input.toDF().toDF("k", "ts")
    .withWatermark("ts", "5 seconds").groupBy(window(col("ts"), "10 seconds"), col("k")).agg(count("*").as("n"))

  test("the SQL form (sluice_suppress) puts the same suppress node in the plan") {
    val s = spark
    import s.implicits._
    implicit val sqlContext: org.apache.spark.sql.SQLContext = spark.sqlContext
    counts(MemoryStream[(String, Timestamp)]).createOrReplaceTempView("plan_suite_counts")
    val plan = spark.sql("SELECT * FROM sluice_suppress(TABLE(plan_suite_counts), 'until_window_closes', " +
      "'max_records=10 shut_down_when_full')").queryExecution.analyzed
    val suppress = plan.collect { case n: SuppressNode => n }
    assert(suppress.size == 1 && suppress.head.window.map(_.name).contains("window"), plan)
    assert(suppress.head.suppressed == Suppressed.untilWindowCloses(BufferConfig.maxRecords(10).shutDownWhenFull()))
  }

  test("refuses to start suppress in another output mode than update (the check rule), saying why") {
    val s = spark
    import s.implicits._
    implicit val sqlContext: org.apache.spark.sql.SQLContext = spark.sqlContext
    val query = Suppress(counts(MemoryStream[(String, Timestamp)]), untilClosed)
    val e = intercept[org.apache.spark.sql.AnalysisException] {
      query.writeStream.outputMode("append").format("noop").start().stop()
    }
    assert(e.getMessage.contains("suppress needs the query's output mode to be update, but it is Append"), e.getMessage)
  }

  test("plans a time limit as the suppress operator (only untilWindowCloses is fused)") {
    val (plan, _) = run(Suppressed.untilTimeLimit(1000L, BufferConfig.unbounded()), timeCol = Some("window.end"))()
    val suppress = nodes[SuppressExec](plan)
    assert(suppress.size == 1 && suppress.head.suppressed.isInstanceOf[UntilTimeLimit], plan)
  }

  test("a running query's batch planned on another thread than the query's (query.explain() while it plans) " +
    "gets the batch's state location") {
    val s = spark
    import s.implicits._
    implicit val sqlContext: org.apache.spark.sql.SQLContext = spark.sqlContext
    val input = MemoryStream[(String, Timestamp)]
    val counts = input.toDF().toDF("k", "ts").withWatermark("ts", "5 seconds")
      .groupBy(window(col("ts"), "10 seconds"), col("k")).agg(count("*").as("n"))
    val q = withConf(Unfused) {
      Suppress(counts, untilClosed).writeStream.outputMode("update")
        .option("checkpointLocation", tempDir("sluice-off-thread").toString)
        .foreachBatch((ds: org.apache.spark.sql.DataFrame, _: Long) => { ds.collect(); () }).start()
    }
    try {
      input.addData(("a", new Timestamp(1000L)))
      q.processAllAvailable()
      val stream = q.asInstanceOf[StreamingQueryWrapper].streamingQuery
      val exec = stream.lastExecution
      val onQueryThread = nodes[SuppressExec](exec.executedPlan).head.context.get.stateInfo
      // here, on the test thread: the query's own stream session finds the query, no other session does
      assert(StatefulOperatorSupport.currentStream(exec.sparkSession).contains(stream))
      assert(StatefulOperatorSupport.currentStream(spark).isEmpty)
      val node = exec.optimizedPlan.collectFirst { case n: SuppressNode => n }.get
      val planned = SuppressStrategy(exec.sparkSession)(node).collect { case e: SuppressExec => e }
      assert(planned.size == 1 && planned.head.context.map(_.stateInfo).contains(onQueryThread), planned)
    } finally q.stop()
  }
}
