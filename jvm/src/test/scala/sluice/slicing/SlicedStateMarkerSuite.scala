package sluice.slicing

import java.nio.file.{Files, Path}
import java.sql.Timestamp

import org.apache.spark.sql.execution.streaming.runtime.MemoryStream
import org.apache.spark.sql.functions.{col, count, window}
import org.apache.spark.sql.streaming.StreamingQueryException

import sluice.PlanSuite
import sluice.slicing.internal.SlicedStateMarker

/**
 * The refusal of sliced state ([[SlicedStateMarker]], a physical rule): a checkpoint whose aggregation
 * state directory holds the marker of the removed `spark.sluice.window.slicing.state` fails when its
 * query first plans the aggregation, naming the marker; the same checkpoint without it runs on.
 */
class SlicedStateMarkerSuite extends PlanSuite {

  /**
   * Runs a windowed count on `ckpt` over a new memory stream fed `adds` times (a restart needs more
   * than the checkpoint's offsets for a new batch), and the query's last batch id, or why it failed.
   */
  private def runOn(ckpt: Path, adds: Int): Either[Throwable, Long] = {
    val s = spark
    import s.implicits._
    implicit val sqlContext: org.apache.spark.sql.SQLContext = spark.sqlContext
    val input = MemoryStream[(String, Timestamp)]
    val q = input.toDF().toDF("k", "ts").withWatermark("ts", "5 seconds")
      .groupBy(window(col("ts"), "10 seconds", "5 seconds"), col("k")).agg(count("*"))
      .writeStream.outputMode("update").format("noop").option("checkpointLocation", ckpt.toString).start()
    try {
      (1 to adds).foreach(i => input.addData(("a", new Timestamp(i * 1000L))))
      try { q.processAllAvailable(); Right(q.lastProgress.batchId) }
      catch { case e: StreamingQueryException => Left(e.getCause) }
    } finally q.stop()
  }

  test("refuses a checkpoint with the marker of sliced state, naming it") {
    val ckpt = tempDir("sluice-sliced")
    assert(runOn(ckpt, 1) == Right(0L))
    val state = ckpt.resolve("state").resolve("0")
    assert(Files.isDirectory(state), state)
    Files.write(state.resolve(SlicedStateMarker.MarkerName), Array.emptyByteArray)
    runOn(ckpt, 2) match {
      case Left(e: IllegalStateException) => assert(e.getMessage.contains(SlicedStateMarker.MarkerName), e.getMessage)
      case other => fail(s"a restart on sliced state was not refused: $other")
    }
  }

  test("leaves a checkpoint without the marker alone: a restart runs on") {
    val ckpt = tempDir("sluice-sliced")
    assert(runOn(ckpt, 1) == Right(0L))
    // batch 1 planned and ran on the checkpoint's state (a no-data batch may follow)
    assert(runOn(ckpt, 2).exists(_ >= 1L))
  }
}
