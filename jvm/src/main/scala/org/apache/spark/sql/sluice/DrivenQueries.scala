package org.apache.spark.sql.sluice

import scala.collection.mutable.ArrayBuffer

import org.apache.spark.sql.{DataFrame, Encoders, Row, SparkSession}
import org.apache.spark.sql.classic.{Dataset => ClassicDataset, SparkSession => ClassicSession}
import org.apache.spark.sql.execution.streaming.Sink
import org.apache.spark.sql.execution.streaming.runtime.{IncrementalExecution, MemoryStream}
import org.apache.spark.sql.streaming.{OutputMode, StreamingQuery, Trigger}
import org.apache.spark.sql.types.StructType
import org.apache.spark.util.ManualClock

/**
 * What a test driver of a user's pipeline needs from Spark's streaming engine that Spark keeps
 * `private[sql]`/`private[spark]` (as Spark's own StreamTest uses it): a query started with a clock
 * the test advances (`StreamingQueryManager.startQuery`'s `triggerClock`), an in-memory source
 * (`MemoryStream`, in `execution.streaming.runtime` on every supported minor), and a sink that
 * keeps each batch's rows (a v1 `Sink`).
 */
object DrivenQueries {

  /**
   * Starts `df` (built on a [[DrivenSource]]) on `checkpoint` with `clock` as its trigger clock and
   * a trigger every millisecond of it: the query runs one trigger each time the clock is advanced
   * past the next millisecond, and none while it stands still. Named arguments: Spark 4.2 added the
   * parameter `userSpecifiedSinkName` second, which 4.1 does not have.
   */
  def start(df: DataFrame, checkpoint: String, outputMode: OutputMode, sink: DrivenSink,
      clock: DrivenClock, name: Option[String]): StreamingQuery = {
    val session = df.sparkSession.asInstanceOf[ClassicSession]
    session.streams.startQuery(
      userSpecifiedName = name,
      userSpecifiedCheckpointLocation = Some(checkpoint),
      df = df.asInstanceOf[ClassicDataset[_]],
      extraOptions = Map.empty,
      sink = sink,
      outputMode = outputMode,
      recoverFromCheckpointLocation = true,
      trigger = Trigger.ProcessingTime(1L),
      triggerClock = clock)
  }
}

/**
 * An in-memory source of rows of `schema` (Spark's `MemoryStream`): each [[add]] is one offset,
 * read by the next micro-batch. Its data lives only in this object, so a test that restarts a
 * query hands the new run a new source with the same additions replayed (see sluice.testing).
 */
final class DrivenSource(session: SparkSession, val schema: StructType) {
  private val stream = MemoryStream.apply[Row](Encoders.row(schema), session)

  def toDF: DataFrame = stream.toDF()

  /** Adds `rows` as one offset; returns how many offsets the source has now. */
  def add(rows: Seq[Row]): Long = {
    stream.addData(rows)
    added += 1
    added
  }

  private var added = 0L
}

/**
 * The trigger clock of a driven query: a manual clock that records when the stream thread waits
 * on it, as Spark's test `StreamManualClock` does, so that a test can tell the trigger at a given
 * time has run (the thread waits again, having started waiting at that time).
 */
final class DrivenClock(startMs: Long) extends ManualClock(startMs) {
  private var waitStartMs: Option[Long] = None

  override def waitTillTime(targetTime: Long): Long = synchronized {
    try {
      waitStartMs = Some(getTimeMillis())
      super.waitTillTime(targetTime)
    } finally waitStartMs = None
  }

  def nowMs: Long = getTimeMillis()

  def advanceMs(ms: Long): Unit = advance(ms)

  /** Whether the stream thread is waiting for the clock, having started to wait at `timeMs`. */
  def waitingSince(timeMs: Long): Boolean = synchronized(waitStartMs.contains(timeMs))
}

/**
 * A sink that keeps every delivery of a batch: its id, its timestamp (the trigger clock's time the
 * batch was planned at, from the offset log on a replay), its rows. Replays are kept too (the same
 * id delivered again), so a test can compare them. [[failNext]] makes the next delivery fail after
 * its rows were computed, as a process dying before the batch's commit would.
 */
final class DrivenSink extends Sink {
  private val delivered = ArrayBuffer.empty[DrivenSink.Delivery]
  @volatile private var failing = false

  override def addBatch(batchId: Long, data: DataFrame): Unit = {
    val rows = data.collect().toSeq
    val timestampMs = data.asInstanceOf[ClassicDataset[_]].queryExecution match {
      case ie: IncrementalExecution => ie.offsetSeqMetadata.batchTimestampMs
      case _ => -1L
    }
    val fail = failing
    failing = false
    synchronized { delivered += DrivenSink.Delivery(batchId, timestampMs, data.schema, rows, fail) }
    if (fail) throw new IllegalStateException(DrivenSink.InjectedFailure + s" (batch $batchId)")
  }

  def failNext(): Unit = failing = true

  def deliveries: Seq[DrivenSink.Delivery] = synchronized(delivered.toList)

  override def toString: String = "DrivenSink"
}

object DrivenSink {

  /** The message of the failure [[DrivenSink.failNext]] injects. */
  val InjectedFailure = "sluice.testing: the batch failed as the test asked"

  /** One delivery; `failed` when the sink failed it as [[DrivenSink.failNext]] asked. */
  final case class Delivery(batchId: Long, timestampMs: Long, schema: StructType, rows: Seq[Row], failed: Boolean)
}
