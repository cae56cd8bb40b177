package sluice.sessions

import java.sql.Timestamp

import org.apache.spark.sql.{DataFrame, Row}
import org.apache.spark.sql.execution.SparkPlan
import org.apache.spark.sql.execution.streaming.runtime.{IncrementalExecution, MemoryStream}
import org.apache.spark.sql.functions.{col, count, session_window}
import org.apache.spark.sql.streaming.OutputMode

import sluice.PlanSuite
import sluice.sessions.internal.{SessionUpdateExec, SessionUpdateNode, SessionUpdateRule}
import sluice.spark.PlanTypes.{SessionWindowStateStoreRestoreExec, SessionWindowStateStoreSaveExec}
import sluice.suppress.{BufferConfig, Suppress, Suppressed}
import sluice.suppress.internal.{LateRecordsCounted, LateRecordsExec, SuppressExec}

/**
 * Session windows in update mode ([[SessionUpdateRule]] in the analyzer, `SessionUpdateStrategy` in
 * the planner): Spark refuses update mode for a session-window aggregation; sluice rewrites it into a
 * [[SessionUpdateNode]], planned with [[SessionUpdateExec]] where Spark's session save would be.
 * Append mode keeps Spark's plan; an unbounded `untilWindowCloses` right above is fused into Spark's
 * append-mode save (`spark.sluice.suppress.fused`, on by default).
 */
class SessionUpdateRuleSuite extends PlanSuite {

  private def run(mode: String, suppressed: Option[Suppressed] = None, lateBatch: Boolean = false)(
      conf: (String, String)*): (IncrementalExecution, Seq[Row]) = {
    val s = spark
    import s.implicits._
    implicit val sqlContext: org.apache.spark.sql.SQLContext = spark.sqlContext
    val input = MemoryStream[(String, Timestamp)]
    val sessions: DataFrame = input.toDF().toDF("k", "ts").withWatermark("ts", "0 seconds")
      .groupBy(session_window(col("ts"), "5 seconds"), col("k")).agg(count("*").as("n"))
    val query = suppressed.fold(sessions)(Suppress(sessions, _))
    def at(k: String, sec: Long) = (k, new Timestamp(sec * 1000))
    withConf(conf: _*)(lastBatch(query, mode)(Seq(
        () => input.addData(at("a", 1), at("a", 3), at("b", 2)),
        // a's session grows; the watermark (12 s) closes b's session [2, 7) and a's [1, 12) stays open
        () => input.addData(at("a", 7), at("b", 12)),
        () => input.addData(at("b", 30))) ++
        // a's own session [4, 9) ends before the watermark (30 s): late
        (if (lateBatch) Seq(() => input.addData(at("a", 4))) else Nil)))
  }

  private def saves(plan: SparkPlan) = nodes[SessionWindowStateStoreSaveExec](plan)

  private def closed(rows: Seq[Row]): Seq[(String, Long)] =
    rows.map(r => (r.getAs[String]("k"), r.getAs[Long]("n"))).sorted

  test("rewrites a session-window aggregation in update mode: sluice's session update where Spark's save was") {
    val (exec, rows) = run("update")()
    assert(exec.analyzed.exists(_.isInstanceOf[SessionUpdateNode]), exec.analyzed)
    val plan = exec.executedPlan
    assert(nodes[SessionUpdateExec](plan).size == 1 && saves(plan).isEmpty, plan)
    // every update of a session, and the flag column stays inside the plan
    assert(!rows.head.schema.fieldNames.contains(SessionUpdateRule.RetractedColumn), rows.head.schema)
    assert(rows.exists(r => r.getAs[String]("k") == "a" && r.getAs[Long]("n") == 3L), rows)
  }

  test("leaves append mode to Spark: its session save, no sluice operator") {
    val (exec, rows) = run("append")()
    assert(!exec.analyzed.exists(_.isInstanceOf[SessionUpdateNode]), exec.analyzed)
    val plan = exec.executedPlan
    assert(nodes[SessionUpdateExec](plan).isEmpty && saves(plan).size == 1, plan)
    assert(closed(rows) == Seq(("a", 3L), ("b", 1L), ("b", 1L)), rows)
  }

  test("fuses an unbounded untilWindowCloses over sessions into Spark's append-mode save, with its rows") {
    val (exec, rows) = run("update", Some(Suppressed.untilWindowCloses(BufferConfig.unbounded())))()
    val plan = exec.executedPlan
    assert(nodes[SessionUpdateExec](plan).isEmpty && nodes[SuppressExec](plan).isEmpty, plan)
    assert(saves(plan).size == 1 && saves(plan).head.outputMode.contains(OutputMode.Append()), plan)
    assert(closed(rows) == closed(run("append")()._2), rows)
  }

  test("runs suppress over sessions unfused with spark.sluice.suppress.fused off, with the same final rows") {
    val until = Suppressed.untilWindowCloses(BufferConfig.unbounded())
    val (exec, rows) = run("update", Some(until))("spark.sluice.suppress.fused" -> "false")
    val plan = exec.executedPlan
    assert(nodes[SuppressExec](plan).size == 1 && nodes[SessionUpdateExec](plan).size == 1, plan)
    assert(closed(rows) == closed(run("append")()._2), rows)
  }

  test("late records over sessions: taken out below the session restore, fused and unfused, written without the flag") {
    def lateRecords(conf: (String, String)*) = {
      val dir = tempDir("sluice-session-late").resolve("late").toString
      val until = Suppressed.untilWindowCloses(BufferConfig.unbounded()).withLateRecords(dir, "json")
      (run("update", Some(until), lateBatch = true)(conf: _*)._1.executedPlan, dir)
    }
    val (fused, fusedDir) = lateRecords()
    assert(nodes[SuppressExec](fused).isEmpty && nodes[LateRecordsCounted](fused).size == 1, fused)
    val (unfused, unfusedDir) = lateRecords("spark.sluice.suppress.fused" -> "false")
    assert(nodes[SuppressExec](unfused).size == 1 && nodes[LateRecordsCounted](unfused).isEmpty, unfused)
    Seq(fused, unfused).foreach { plan =>
      val restores = nodes[SessionWindowStateStoreRestoreExec](plan)
      assert(restores.size == 1 && nodes[LateRecordsExec](restores.head).size == 1, plan)
    }
    Seq(fusedDir, unfusedDir).foreach { dir =>
      val late = spark.read.option("recursiveFileLookup", "true").json(dir)
      assert(late.columns.sorted.toSeq == Seq("k", "late_by_ms", "session_window", "ts"), late.columns.toSeq)
      assert(late.count() == 1, dir)
    }
  }

  test("leaves an aggregation without a session window alone in update mode") {
    val s = spark
    import s.implicits._
    implicit val sqlContext: org.apache.spark.sql.SQLContext = spark.sqlContext
    val input = MemoryStream[(String, Long)]
    val (exec, _) =
      lastBatch(input.toDF().toDF("k", "v").groupBy("k").count(), "update")(Seq(() => input.addData(("a", 1L))))
    assert(!exec.analyzed.exists(_.isInstanceOf[SessionUpdateNode]), exec.analyzed)
    assert(nodes[SessionUpdateExec](exec.executedPlan).isEmpty)
  }
}
