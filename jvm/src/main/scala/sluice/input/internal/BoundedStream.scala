package sluice.input.internal

import java.{util => ju}
import java.util.Optional

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.connector.read.{InputPartition, PartitionReaderFactory}
import org.apache.spark.sql.connector.read.streaming._

import sluice.conf.SluiceConf
import sluice.spark.SourceTypes.LongOffset

/**
 * How admission control sees one kind of v2 source: its offsets as positions per lane, the cost
 * of a unit per lane, and what tasks measure.
 */
private[sluice] sealed trait Lanes {
  def positions(offset: Offset): Map[String, Long]
  def withPositions(offset: Offset, positions: Map[String, Long]): Offset

  /** Mean and standard deviation of a unit's bytes in `lane`, and how many units they came from. */
  def estimate(lane: String): (Double, Double, Double)

  /** At most this many units of `lane` in one batch, given its even `share` of the budget. */
  def cap(lane: String, share: Double): Long = Long.MaxValue
  def readerFactory(inner: PartitionReaderFactory): PartitionReaderFactory = inner

  /** Bytes of the batch that read from `start` to `end`, when known without measuring. */
  def knownBytes(start: Offset, end: Offset): Option[Long]

  /** Called with the range each lane with data waiting would read, before it is planned. */
  def prepare(ranges: Map[String, (Long, Long)]): Unit = ()

  /** Takes in what tasks measured since the last call; returns its bytes. */
  def absorb(): Long = 0L

  /** The stream stops. */
  def close(): Unit = ()
}

/** Kafka: a lane is a topic-partition, a unit a record; sizes are measured while reading. */
private[sluice] object KafkaLanes {

  /** Records a partition needs measured before its own statistics replace its topic's. */
  val OwnSamples = 30
}

private[sluice] final class KafkaLanes(
    stream: MicroBatchStream,
    defaultRecordBytes: Long,
    sampler: Option[KafkaSampler] = None,
    sizeFile: Option[SizeFile] = None)
  extends Lanes {
  private val acc = new LaneSizeAccumulator
  SparkSession.active.sparkContext.register(acc, "sluice.input.kafkaRecordSizes")
  private var seen = Map.empty[String, SizeStats]
  private var estimates: Map[String, SizeStats] = sizeFile.map(_.read()).getOrElse(Map.empty)
  private var samples = Map.empty[String, Sample]
  private var sampleTried = Set.empty[String]

  override def positions(offset: Offset): Map[String, Long] = KafkaOffsets.positions(offset.json())
  override def withPositions(offset: Offset, positions: Map[String, Long]): Offset =
    stream.deserializeOffset(KafkaOffsets.withPositions(offset.json(), positions))

  private def topicOf(lane: String): String = lane.substring(0, lane.lastIndexOf('/') + 1)
  private def measured(lane: String): Map[String, SizeStats] =
    estimates.filter(_._1.startsWith(topicOf(lane)))

  /** Partitions whose topic has nothing measured (nor saved) are sampled once, before planning. */
  override def prepare(ranges: Map[String, (Long, Long)]): Unit = sampler.foreach { s =>
    val need = ranges.filter { case (lane, _) => !sampleTried(lane) && measured(lane).isEmpty }
    if (need.nonEmpty) {
      samples ++= s.sample(need)
      sampleTried ++= need.keys
    }
  }

  /**
   * A partition with few records read is assumed to hold records like the rest of its topic (the
   * pooled statistics of all its partitions); with fewer than two records measured, the standard
   * deviation is taken to be the mean. A topic with nothing measured uses the partition's sample;
   * without a sample, records of `defaultRecordBytes`.
   */
  override def estimate(lane: String): (Double, Double, Double) = {
    val own = estimates.getOrElse(lane, SizeStats.Zero)
    val stats = if (own.count >= KafkaLanes.OwnSamples) own
    else {
      val topic = measured(lane).values.foldLeft(SizeStats.Zero)(_.plus(_))
      if (topic.count >= 1) topic else samples.get(lane).map(_.stats).getOrElse(SizeStats.Zero)
    }
    if (stats.count < 1) (defaultRecordBytes.toDouble, 0.0, Double.PositiveInfinity)
    else (stats.mean, if (stats.count < 2) stats.mean else stats.sd, stats.count)
  }

  /**
   * Slow start: a partition sized from a sample admits at most what fits its share of the budget
   * if every record were as large as the largest sampled one. Once measured, while its sizes rest
   * on few records, it admits at most twice the records measured so far (its share of its
   * topic's), so early estimates are tested on small batches; but never fewer than fit its share
   * at the worst size known (the largest sampled in its topic, else `defaultRecordBytes`).
   */
  override def cap(lane: String, share: Double): Long = {
    val own = estimates.getOrElse(lane, SizeStats.Zero).count
    val topic = measured(lane)
    if (own >= KafkaLanes.OwnSamples) Long.MaxValue
    else if (topic.isEmpty) samples.get(lane).filter(_.largest > 0)
      .map(s => math.max(1L, (share / s.largest).toLong)).getOrElse(Long.MaxValue)
    else {
      val worst = samples.filter(_._1.startsWith(topicOf(lane))).values.map(_.largest)
        .filter(_ > 0).maxOption.getOrElse(defaultRecordBytes)
      math.max((2 * topic.values.map(_.count).sum / topic.size).toLong, (share / worst).toLong)
    }
  }

  override def readerFactory(inner: PartitionReaderFactory): PartitionReaderFactory =
    new KafkaMeasuringReaderFactory(inner, acc)
  override def knownBytes(start: Offset, end: Offset): Option[Long] = None

  override def absorb(): Long = synchronized {
    val now = acc.value
    val delta = now.map { case (k, v) => k -> v.minus(seen.getOrElse(k, SizeStats.Zero)) }
      .filter(_._2.count > 0)
    seen = now
    delta.foreach { case (k, d) =>
      estimates += k -> estimates.getOrElse(k, SizeStats.Zero).decayedPlus(d, keep = 0.8)
    }
    if (delta.nonEmpty) sizeFile.foreach(_.save(estimates))
    delta.values.map(_.sum).sum.toLong
  }

  override def close(): Unit = sizeFile.foreach(_.flush())
}

/**
 * The rate source: one lane whose unit is a second of rows (its offsets count seconds), each row
 * an UnsafeRow of a timestamp and a long (8 bytes of null bits + 2 x 8 bytes).
 */
private[sluice] final class RateLanes(rowsPerSecond: Long) extends Lanes {
  private val bytesPerSecond = rowsPerSecond * RateLanes.RowBytes
  override def positions(offset: Offset): Map[String, Long] =
    Map(RateLanes.Lane -> LongOffset(offset.json().toLong).offset)
  override def withPositions(offset: Offset, positions: Map[String, Long]): Offset =
    LongOffset(positions(RateLanes.Lane))
  override def estimate(lane: String): (Double, Double, Double) =
    (bytesPerSecond.toDouble, 0.0, Double.PositiveInfinity)
  override def knownBytes(start: Offset, end: Offset): Option[Long] =
    Some((positions(end)(RateLanes.Lane) - positions(start)(RateLanes.Lane)) * bytesPerSecond)
}

private[sluice] object RateLanes {
  val Lane = "rate"
  val RowBytes = 24L
}

/**
 * A v2 micro-batch stream with a byte bound. The source decides what it would admit under its own
 * limits (maxOffsetsPerTrigger, AvailableNow); sluice then moves the end of the lanes that would
 * exceed their share of the bound back, never below one unit past the start. Offsets, their log
 * and recovery stay the source's own: the trimmed end is an ordinary offset of that source.
 */
private[sluice] final class BoundedMicroBatchStream private[input] (
    val inner: MicroBatchStream,
    lanes: Lanes,
    budget: Budget)
  extends MicroBatchStream with SupportsTriggerAvailableNow with SupportsRealTimeMode with ReportsSourceMetrics {

  @volatile private var availableNowEnd: Offset = _
  @volatile private var realTime = false
  @volatile private var lastThrottled = 0
  @volatile private var batchBytes = 0L
  @volatile private var lastExecuted: (Offset, Offset) = _

  override def initialOffset(): Offset = inner.initialOffset()
  override def deserializeOffset(json: String): Offset = inner.deserializeOffset(json)
  override def commit(end: Offset): Unit = inner.commit(end)
  override def stop(): Unit = { lanes.close(); budget.release(); inner.stop() }
  override def toString: String = inner.toString

  override def getDefaultReadLimit: ReadLimit = inner match {
    case s: SupportsAdmissionControl => s.getDefaultReadLimit
    case _ => ReadLimit.allAvailable()
  }

  override def reportLatestOffset(): Offset = inner match {
    case s: SupportsAdmissionControl => s.reportLatestOffset()
    case _ => null
  }

  override def latestOffset(): Offset = inner.latestOffset()

  override def latestOffset(start: Offset, limit: ReadLimit): Offset = {
    lanes.absorb()
    batchBytes = 0L
    lastExecuted = null // set by planInputPartitions when the batch reads from this source
    val proposed = inner match {
      case s: SupportsAdmissionControl => s.latestOffset(start, limit)
      case s => Option(availableNowEnd).getOrElse(s.latestOffset())
    }
    if (proposed == null || start == null || realTime) return proposed
    val from = lanes.positions(start)
    val to = lanes.positions(proposed)
    // Lanes new since `start` are the source's to place (it knows where they begin).
    val moving = to.filter { case (lane, end) => from.get(lane).exists(_ < end) }
    lanes.prepare(moving.map { case (lane, end) => lane -> (from(lane), end) })
    val share = budget.bytes.toDouble / math.max(1, moving.size)
    val waiting = moving.toSeq.map { case (lane, end) =>
      val (mean, sd, samples) = lanes.estimate(lane)
      Lane(lane, end - from(lane), mean, sd, samples, lanes.cap(lane, share))
    }
    val plan = Admission.plan(waiting, budget.bytes)
    lastThrottled = plan.throttled
    if (plan.throttled == 0) proposed
    else lanes.withPositions(proposed, plan.units.map { case (lane, n) => lane -> (from(lane) + n) })
  }

  override def prepareForTriggerAvailableNow(): Unit = inner match {
    case s: SupportsTriggerAvailableNow => s.prepareForTriggerAvailableNow()
    case s => availableNowEnd = s.latestOffset()
  }

  override def planInputPartitions(start: Offset, end: Offset): Array[InputPartition] = {
    lastExecuted = (start, end)
    inner.planInputPartitions(start, end)
  }

  // Real-time reads: nothing to measure (no batch's bytes to bound), so Spark's reader as it is.
  override def createReaderFactory(): PartitionReaderFactory =
    if (realTime) inner.createReaderFactory()
    else lanes.readerFactory(inner.createReaderFactory())

  override def metrics(latestConsumedOffset: Optional[Offset]): ju.Map[String, String] = {
    val own = inner match {
      case s: ReportsSourceMetrics => s.metrics(latestConsumedOffset).asScala.toMap
      case _ => Map.empty[String, String]
    }
    batchBytes += lanes.absorb()
    val bytes = Option(lastExecuted).flatMap { case (s, e) => lanes.knownBytes(s, e) }
      .getOrElse(batchBytes)
    (own ++ BoundedMicroBatchStream.metricsOf(bytes, lastThrottled)).asJava
  }

  // Real-time mode reads without batch ends: a byte bound per batch has nothing to bound there. The
  // session-wide bound is left inert (it bounds every micro-batch query of the session); a source's
  // own option asks for a bound on this source alone, which cannot be honoured, so it is refused.
  override def prepareForRealTimeMode(): Unit = inner match {
    case _ if budget.isInstanceOf[Budget.Fixed] =>
      throw new IllegalArgumentException(sluice.conf.RealTimeMode.unsupported(
          s"The input bound (source option ${Budget.SourceOption}=${budget.bytes})",
          "a real-time batch has no end offset: its tasks read record by record until the checkpoint interval " +
            "ends, so there is no batch whose bytes to bound",
          s"Remove the ${Budget.SourceOption} option and bound memory with the source's own fetch settings " +
            "(for Kafka: maxPartitionFetchBytes, fetch.max.bytes, max.poll.records), " +
            sluice.conf.RealTimeMode.orUseMicroBatches))
    case s: SupportsRealTimeMode => realTime = true; s.prepareForRealTimeMode()
    case s => throw new IllegalArgumentException(s"Source $s does not support real-time mode")
  }
  override def planInputPartitions(start: Offset): Array[InputPartition] =
    inner.asInstanceOf[SupportsRealTimeMode].planInputPartitions(start)
  override def mergeOffsets(offsets: Array[PartitionOffset]): Offset =
    inner.asInstanceOf[SupportsRealTimeMode].mergeOffsets(offsets)
}

private[sluice] object BoundedMicroBatchStream {
  val BytesMetric: String = SluiceConf.SourceBytesMetric
  val ThrottledMetric: String = SluiceConf.SourceThrottledMetric

  def metricsOf(bytes: Long, throttled: Int): Map[String, String] =
    Map(BytesMetric -> bytes.toString, ThrottledMetric -> throttled.toString)
}
