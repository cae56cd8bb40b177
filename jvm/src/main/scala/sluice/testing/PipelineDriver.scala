package sluice.testing

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.{DataFrame, Row, SparkSession}
import org.apache.spark.sql.streaming.{OutputMode, StreamingQuery}
import org.apache.spark.sql.types.StructType

import org.apache.spark.sql.sluice.{DrivenClock, DrivenQueries, DrivenSink, DrivenSource}

/**
 * Runs a user's streaming pipeline in a test, as Kafka Streams' TopologyTestDriver runs a topology:
 * input is piped in batch by batch, the wall clock moves only when the test advances it, and each
 * micro-batch's output rows are kept. The query runs on the test's own SparkSession (with sluice
 * configured), reading an in-memory source of rows of `schema` and writing to a sink that keeps
 * every batch; its checkpoint is `checkpoint`, so a test can [[restart]] it.
 *
 * The clock is the query's trigger clock, which Spark stamps each batch with: suppress's wall-clock
 * limit and the emission cache's interval are judged by it, and so are their batches without input.
 * The query has a trigger every millisecond of that clock, and the clock stands still unless
 * [[advanceWallClock]] moves it: each call runs the one trigger due at the new time (a batch of the
 * input piped since the last batch, a batch without input if an operator has something due, or
 * nothing), and returns once the query waits for the clock again.
 *
 * `pipeline` builds the output from the input DataFrame; it is called again on every start (each
 * run reads a new source). Python's `sluice.testing.PipelineDriver` builds its DataFrames itself and
 * uses [[input]] and [[start]].
 */
final class PipelineDriver(
    session: SparkSession,
    schema: StructType,
    outputMode: OutputMode,
    checkpoint: String,
    startMs: Long,
    timeoutMs: Long,
    pipeline: Option[DataFrame => DataFrame])
  extends AutoCloseable {

  /** Every addition piped in, in order: each run's source gets them all again (see [[nextSource]]). */
  private val piped = scala.collection.mutable.ArrayBuffer.empty[Seq[Row]]
  private val sink = new DrivenSink
  private var source = nextSource()
  private var clock = new DrivenClock(startMs)
  private var running: Option[StreamingQuery] = None
  private var seen = 0

  /**
   * A new run's source, with every addition piped so far replayed into it, in order. A memory
   * source's data lives only in its object, while the checkpoint records offsets (here the number of
   * additions a batch read up to): a restarted query resumes after the last committed batch's end
   * offset, or replays an uncommitted batch over the offsets its log entry names. Replaying all
   * additions makes every offset mean the same rows as in the run that logged it, so the new run
   * reads exactly the additions no committed batch read, and a replayed batch reads what it read
   * first. Replaying only the uncommitted ones would shift the offsets.
   */
  private def nextSource(): DrivenSource = {
    val s = new DrivenSource(session, schema)
    piped.foreach(s.add)
    s
  }

  /** The input DataFrame of the run to be started next (a streaming DataFrame of `schema`). */
  def input: DataFrame = source.toDF

  /** Starts the query of `output`, which must be built on [[input]], on the checkpoint. */
  def start(output: DataFrame): Unit = {
    require(running.isEmpty, "the query is running: stop or restart it")
    clock = new DrivenClock(clock.nowMs)
    val q = DrivenQueries.start(output, checkpoint, outputMode, sink, clock, None)
    running = Some(q)
    // The first trigger runs at once (a batch replayed from the log, or input piped while stopped).
    awaitIdle(q)
  }

  /** Starts the query of `pipeline` over [[input]]. */
  def start(): Unit = start(pipeline.getOrElse(
      throw new IllegalStateException("no pipeline given: use start(output)"))(input))

  /** The running query. */
  def query: StreamingQuery = running.getOrElse(throw new IllegalStateException("the query is not running"))

  /** Pipes `rows` in as one addition to the source: the next batch reads it with any other piped since. */
  def pipeInput(rows: Seq[Row]): Unit = {
    piped += rows.toList
    source.add(rows)
  }

  def pipeInput(rows: java.util.List[Row]): Unit = pipeInput(rows.asScala.toSeq)

  /** Pipes the rows of a batch DataFrame of `schema` in as one addition. */
  def pipeInput(rows: DataFrame): Unit = pipeInput(rows.collect().toSeq)

  /** The wall clock's time, in milliseconds. */
  def wallClockMs: Long = clock.nowMs

  /**
   * Moves the wall clock `ms` (at least 1) forward and runs the trigger due then; returns the
   * deliveries the sink got meanwhile (none if the trigger ran no batch). If the batch fails the
   * query's error is thrown, except a failure [[failNextBatch]] asked for: the query then has
   * stopped, and [[restart]] resumes it.
   */
  def advanceWallClock(ms: Long): Seq[DrivenSink.Delivery] = {
    require(ms >= 1, s"the clock moves forward by at least 1 ms, not $ms")
    val q = query
    clock.advanceMs(ms)
    awaitIdle(q)
    newDeliveries()
  }

  /** Makes the next batch fail in the sink, after its rows were computed and its state committed, as
   * a process killed before the batch's commit: a restart replays the batch. */
  def failNextBatch(): Unit = sink.failNext()

  /** Stops the query cleanly (any batch running finishes first); the checkpoint stays. */
  def stop(): Unit = {
    running.foreach(_.stop())
    running = None
    source = nextSource()
  }

  /** Stops the query and starts it again on the same checkpoint; returns what the restart delivered. */
  def restart(output: DataFrame => DataFrame): Seq[DrivenSink.Delivery] = {
    stop()
    start(output(input))
    newDeliveries()
  }

  def restart(): Seq[DrivenSink.Delivery] = restart(pipeline.getOrElse(
      throw new IllegalStateException("no pipeline given: use stop(), input and start(output)")))

  /** Every delivery so far, replays included, in order. */
  def deliveries: Seq[DrivenSink.Delivery] = sink.deliveries

  def deliveriesList: java.util.List[DrivenSink.Delivery] = deliveries.asJava

  /** A delivery's rows as a local DataFrame (for Python to collect). */
  def rowsOf(d: DrivenSink.Delivery): DataFrame = session.createDataFrame(d.rows.asJava, d.schema)

  override def close(): Unit = running.foreach { q => running = None; q.stop() }

  private def newDeliveries(): Seq[DrivenSink.Delivery] = {
    val all = sink.deliveries
    val fresh = all.drop(seen)
    seen = all.size
    fresh
  }

  /** Waits until the stream thread waits for the clock at its current time (the trigger due has
   * run), or the query has stopped. */
  private def awaitIdle(q: StreamingQuery): Unit = {
    val deadline = System.nanoTime() + timeoutMs * 1000000L
    while (q.isActive && !clock.waitingSince(clock.nowMs)) {
      if (System.nanoTime() > deadline) {
        throw new IllegalStateException(s"sluice.testing: the query ran no trigger within $timeoutMs ms " +
          s"(clock at ${clock.nowMs} ms): ${q.status}")
      }
      Thread.sleep(2)
    }
    if (!q.isActive) stopped(q)
  }

  /** The query stopped by itself: a failure the test asked for leaves it stopped; another is thrown. */
  private def stopped(q: StreamingQuery): Unit = {
    running = None
    source = nextSource()
    q.exception.foreach { e =>
      if (!Iterator.iterate[Throwable](e)(_.getCause).takeWhile(_ != null)
          .exists(t => Option(t.getMessage).exists(_.contains(DrivenSink.InjectedFailure)))) throw e
    }
  }
}

object PipelineDriver {

  /** A driver of `pipeline` over rows of `schema`, its clock at `startMs`, started. */
  def apply(session: SparkSession, schema: StructType, outputMode: OutputMode, checkpoint: String,
      startMs: Long = 0L, timeoutMs: Long = 120000L)(pipeline: DataFrame => DataFrame): PipelineDriver = {
    val d = new PipelineDriver(session, schema, outputMode, checkpoint, startMs, timeoutMs, Some(pipeline))
    d.start()
    d
  }

  /** A driver not yet started, for callers that build the output themselves (Python). */
  def create(session: SparkSession, schema: StructType, outputMode: String, checkpoint: String, startMs: Long,
      timeoutMs: Long): PipelineDriver =
    new PipelineDriver(session, schema, outputModeOf(outputMode), checkpoint, startMs, timeoutMs, None)

  private def outputModeOf(mode: String): OutputMode = mode.toLowerCase(java.util.Locale.ROOT) match {
    case "append" => OutputMode.Append()
    case "update" => OutputMode.Update()
    case "complete" => OutputMode.Complete()
    case other => throw new IllegalArgumentException(s"output mode must be append, update or complete, not $other")
  }
}
