package sluice.plugin

import java.sql.Timestamp

import org.apache.spark.sql.{DataFrame, ForeachWriter, Row}
import org.apache.spark.sql.catalyst.expressions.{AttributeReference, UnsafeProjection}
import org.apache.spark.sql.catalyst.plans.physical.HashPartitioning
import org.apache.spark.sql.execution.SparkPlan
import org.apache.spark.sql.sluice.RealTimeProgress
import org.apache.spark.sql.execution.streaming.runtime.StreamingQueryWrapper
import org.apache.spark.sql.execution.streaming.sources.LowLatencyMemoryStream
import org.apache.spark.sql.functions.{col, count, session_window, window}
import org.apache.spark.sql.streaming.{StreamingQuery, StreamingQueryException, Trigger}
import org.apache.spark.sql.types.{LongType, StringType, StructType, TimestampType}
import org.scalatest.concurrent.Eventually.{eventually, interval, timeout}
import org.scalatest.time.SpanSugar._

import sluice.PlanSuite
import sluice.spark.RealTimePlans
import sluice.spark.PlanTypes.StateStoreSaveExec
import sluice.suppress.{BufferConfig, Suppress, Suppressed}
import sluice.suppress.internal.SuppressExec

/**
 * Sluice's planning under Spark 4.3's real-time trigger (only 4.3 runs stateful real-time queries, so
 * this suite is compiled for 4.3 alone): suppress is planned as its own operator, never fused (the
 * plan it would get in micro-batches), and passes Spark's operator allowlist with sluice's operators
 * taken out (RealTimeAllowlist); session windows in update mode are refused when the batch is planned,
 * saying why (SessionUpdateStrategy).
 */
class RealTimePlanSuite extends PlanSuite {

  // Real-time stages run at once: one source partition and one shuffle partition on local[2]'s two slots.
  private val OneSlotEach = "spark.sql.shuffle.partitions" -> "1"

  private def start(query: DataFrame): StreamingQuery =
    query.writeStream.outputMode("update").trigger(Trigger.RealTime("5 seconds"))
      .option("checkpointLocation", tempDir("sluice-rt").toString)
      .foreach(new ForeachWriter[Row] {
        override def open(partitionId: Long, epochId: Long): Boolean = true
        override def process(value: Row): Unit = ()
        override def close(errorOrNull: Throwable): Unit = ()
      }).start()

  private def events(): (LowLatencyMemoryStream[(String, Timestamp)], DataFrame) = {
    val s = spark
    import s.implicits._
    val input = LowLatencyMemoryStream.singlePartition[(String, Timestamp)](spark)
    (input, input.toDF().toDF("k", "ts").withWatermark("ts", "5 seconds"))
  }

  /** The first real-time batch's plan: planned (and checked) when the batch starts, not when it ends. */
  private def firstPlan(q: StreamingQuery): SparkPlan = eventually(timeout(60.seconds), interval(50.millis)) {
    assert(q.exception.isEmpty, q.exception)
    // Read once the batch's job runs (the query runs its jobs in a job group named by its run id), so
    // that its query thread planned it: plans are lazy, and one first asked for here would be planned on
    // this thread, where sluice's operators find no running query.
    assert(spark.sparkContext.statusTracker.getJobIdsForGroup(q.runId.toString).nonEmpty)
    val exec = q.asInstanceOf[StreamingQueryWrapper].streamingQuery.lastExecution
    assert(exec != null)
    exec.executedPlan
  }

  // First: the session's allowlist switch is still at its default here.
  test("leaves a real-time plan without sluice's operators to Spark's own allowlist check") {
    withConf(OneSlotEach) {
      val (input, df) = events()
      val q = start(df.selectExpr("k", "ts"))
      try {
        input.addData(("a", new Timestamp(1000)))
        val plan = firstPlan(q)
        assert(RealTimePlans.readsInRealTime(plan), plan)
        assert(spark.conf.get(RealTimePlans.AllowlistCheckKey) == "true") // Spark's check on, as by default
      } finally q.stop()
    }
  }

  test("plans suppress under the real-time trigger as its own operator, never fused, past the allowlist") {
    withConf(OneSlotEach) {
      val (input, df) = events()
      val counts = df.groupBy(window(col("ts"), "10 seconds"), col("k")).agg(count("*").as("n"))
      val q = start(Suppress(counts, Suppressed.untilWindowCloses(BufferConfig.unbounded())))
      try {
        input.addData(("a", new Timestamp(1000)))
        val plan = firstPlan(q)
        val suppress = nodes[SuppressExec](plan)
        assert(suppress.size == 1 && suppress.head.realTime, plan)
        // not fused: no append-mode save of the aggregation
        assert(!nodes[StateStoreSaveExec](plan).exists(_.outputMode.exists(_.toString == "Append")), plan)
        // the aggregation's stages forward the upstream task's progress rows to suppress
        assert(
          plan.collect { case p if RealTimeProgress.isProgressNode(p) => p.nodeName }.sorted ==
            Seq("ProgressPassingAggregate", "ProgressPassingFinal", "ProgressSend"), plan)
        assert(q.isActive && q.exception.isEmpty, q.exception)
        // Spark's allowlist cannot name sluice's operators: sluice turned it off in the session and checks instead
        assert(spark.conf.get(RealTimePlans.AllowlistCheckKey) == "false")
      } finally q.stop()
    }
  }

  test("a progress row reaches each shuffle partition through the exchange's own partitioning") {
    val window = AttributeReference("window", new StructType().add("start", TimestampType).add("end", TimestampType))()
    val key = AttributeReference("k", StringType, nullable = false)()
    val n = AttributeReference("n", LongType)()
    val output = Seq(window, key, n)
    for (partitions <- 1 to 200) {
      val hash = HashPartitioning(Seq(window, key), partitions)
      val offsets = RealTimeProgress.searchOffsets(output, 0, 2, hash)
      val partitionOf = UnsafeProjection.create(Seq(hash.partitionIdExpression), output)
      assert(
        offsets.indices.forall(p => partitionOf(RealTimeProgress.template(output, 0, 2, offsets(p))).getInt(0) == p))
    }
  }

  test("refuses session windows in update mode under the real-time trigger, saying why") {
    withConf(OneSlotEach) {
      val (input, df) = events()
      val q = start(df.groupBy(session_window(col("ts"), "5 seconds"), col("k")).agg(count("*")))
      try {
        input.addData(("a", new Timestamp(1000)))
        val e = intercept[StreamingQueryException](q.awaitTermination(60000))
        val why = Iterator.iterate[Throwable](e)(_.getCause).takeWhile(_ != null)
          .collectFirst { case u: UnsupportedOperationException => u.getMessage }
        assert(why.exists(_.startsWith("A session window aggregation (session_window) in update mode")), e)
        assert(why.exists(_.contains("does not run under Spark's real-time trigger yet")), why)
      } finally q.stop()
    }
  }
}
