package sluice.input.internal

import java.{util => ju}
import java.nio.charset.StandardCharsets
import java.time.Duration

import scala.collection.mutable
import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import com.fasterxml.jackson.databind.ObjectMapper
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.kafka.clients.consumer.{ConsumerConfig, KafkaConsumer}
import org.apache.kafka.common.TopicPartition
import org.apache.kafka.common.serialization.ByteArrayDeserializer
import org.slf4j.LoggerFactory

import sluice.spark.CheckpointTypes.CheckpointFileManager
import sluice.state.FileFormats

/** Record sizes read from a partition before its first batch: their statistics and the largest. */
private[sluice] final case class Sample(stats: SizeStats, largest: Long)

/**
 * Reads a few records of partitions that have no measured sizes yet, on the driver, so that their
 * first batch is sized from real records instead of the 1 MiB worst case. `PerPoint` consecutive
 * records are taken at each of `Points` positions spread over the range the batch would read (not
 * only its start), with small fetches; the whole sampling is bounded by `timeoutMs`. The runs read
 * are [[KafkaSampler.runs]]: one from a seeded random place in each of `Points` equal strata.
 * A partition's sample is used only if every point of it was read: records taken before a timeout
 * cut the sampling short are not a sample of the range (a rare large record may sit at a later
 * point), so such a partition, like one that failed, stays on the conservative default.
 * The consumer is built from the source's `kafka.*` options (security, isolation level, ...)
 * without its group id: it is assigned partitions and never commits.
 */
private[sluice] final class KafkaSampler(kafkaParams: Map[String, String], timeoutMs: Long = 3000L) {
  import KafkaSampler._

  def sample(ranges: Map[String, (Long, Long)]): Map[String, Sample] = {
    val live = ranges.filter { case (_, (start, end)) => start < end }
    if (live.isEmpty) return Map.empty
    val tally = new SampleTally
    val began = System.nanoTime()
    val deadline = began + timeoutMs * 1000000L
    def left: Long = (deadline - System.nanoTime()) / 1000000L
    var consumer: KafkaConsumer[Array[Byte], Array[Byte]] = null
    try {
      consumer = new KafkaConsumer[Array[Byte], Array[Byte]](props)
      val tps = live.keys.map(lane => lane -> partitionOf(lane)).toMap
      consumer.assign(tps.values.asJavaCollection)
      val places = live.map { case (lane, (s, e)) => lane -> runs(lane, s, e) }
      for (point <- 0 until Points if left > 0) {
        // Each point takes the next `PerPoint` records from its position, whatever their sizes:
        // stopping at what the first (byte-limited) fetch returned would under-sample large records.
        val from = places.map { case (lane, run) => lane -> run(point)._1 }
        val until = places.map { case (lane, run) => lane -> run(point)._2 }
        val pending = mutable.Set(from.keys.toSeq: _*)
        consumer.resume(tps.values.asJavaCollection)
        from.foreach { case (lane, at) => consumer.seek(tps(lane), at) }
        // The position, not the last record returned, says a point is read: it also moves past
        // offsets that hold no record (transaction markers, compacted or aborted records).
        def settle(): Unit = pending.toList.foreach { lane =>
          if (consumer.position(tps(lane), Duration.ZERO) >= until(lane)) {
            pending.remove(lane)
            tally.pointRead(lane)
            consumer.pause(ju.List.of(tps(lane)))
          }
        }
        settle()
        while (pending.nonEmpty && left > 0) {
          val records = consumer.poll(Duration.ofMillis(math.min(left, 200L)))
          records.partitions().asScala.foreach { tp =>
            val lane = KafkaOffsets.laneKey(tp.topic, tp.partition)
            if (pending.contains(lane)) {
              records.records(tp).asScala.filter(r => r.offset >= from(lane) && r.offset < until(lane))
                .foreach { r =>
                  tally.add(lane,
                    Option(r.key).map(_.length.toLong).getOrElse(0L) +
                      Option(r.value).map(_.length.toLong).getOrElse(0L))
                }
            }
          }
          settle()
        }
      }
    } catch {
      case NonFatal(e) =>
        log.warn(
          s"Sampling Kafka record sizes failed; partitions without a sample assume " +
            s"${InputBoundRule.DefaultKafkaRecordBytes} bytes a record in their first batch", e)
    } finally {
      if (consumer != null) {
        try consumer.close(Duration.ofMillis(500))
        catch { case NonFatal(_) => }
      }
    }
    val found = tally.complete(Points)
    log.info(s"Sampled record sizes of ${found.size} of ${live.size} Kafka partitions in " +
      s"${(System.nanoTime() - began) / 1000000L} ms")
    found
  }

  private def props: ju.Properties = {
    val p = new ju.Properties()
    kafkaParams.foreach { case (k, v) => p.put(k, v) }
    p.remove(ConsumerConfig.GROUP_ID_CONFIG)
    p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, classOf[ByteArrayDeserializer].getName)
    p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, classOf[ByteArrayDeserializer].getName)
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false")
    // Positions come from the source's offsets; if one was deleted meanwhile, read from the log start.
    p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest")
    // Small fetches: the broker still returns at least one whole record batch per partition.
    p.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, (64 << 10).toString)
    p.put(ConsumerConfig.FETCH_MAX_BYTES_CONFIG, (4 << 20).toString)
    // A fetch past a range's end reaches the end of the log, where the broker would hold it for
    // Kafka's 500 ms before answering; the next point's fetch waits behind it.
    p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "10")
    p.put(ConsumerConfig.CLIENT_ID_CONFIG, "sluice-record-size-sample")
    p
  }
}

private[sluice] object KafkaSampler {
  private val log = LoggerFactory.getLogger(classOf[KafkaSampler])

  /** Positions sampled per partition, and records taken at each. */
  val Points = 8
  val PerPoint = 8

  /**
   * The offset ranges [from, until) sampled of `lane`'s range [start, end), one a point: each begins
   * at a random place in one of `Points` equal strata and holds up to `PerPoint` offsets, ending
   * where the next begins so that no record is counted twice. Evenly spaced points would share one
   * phase whenever the stride is a multiple of a period in the data (every tenth record large, say)
   * and could all miss what that period brings; independent places within the strata miss it only
   * by chance, for each point alone. The places are seeded by the lane and its range, so the same
   * range gives the same sample (and the same first batch) whenever it is planned.
   */
  def runs(lane: String, start: Long, end: Long): IndexedSeq[(Long, Long)] = {
    val random = new ju.SplittableRandom(
      scala.util.hashing.MurmurHash3.stringHash(lane).toLong * 31 * 31 + start * 31 + end)
    def bound(i: Int): Long = start + (BigInt(end - start) * i / Points).toLong // no overflow
    val from = (0 until Points).map { i =>
      val (lo, hi) = (bound(i), bound(i + 1))
      if (hi > lo) lo + random.nextLong(hi - lo) else lo
    }
    from.indices.map(i => from(i) -> math.min(from.lift(i + 1).getOrElse(end), from(i) + PerPoint))
  }

  /** The `kafka.*` options of a Kafka source, without the prefix, as the connector passes them on. */
  def kafkaParams(options: ju.Map[String, String]): Map[String, String] =
    options.asScala.collect {
      case (k, v) if k.toLowerCase(ju.Locale.ROOT).startsWith("kafka.") => k.substring("kafka.".length) -> v
    }.toMap

  def partitionOf(lane: String): TopicPartition = {
    val i = lane.lastIndexOf('/')
    new TopicPartition(lane.substring(0, i), lane.substring(i + 1).toInt)
  }
}

/**
 * The record sizes a sampling read, by partition, and how many of its points were read whole. Only
 * partitions with every point read are a sample; the others give nothing.
 */
private[sluice] final class SampleTally {
  private val found = mutable.HashMap.empty[String, Sample]
  private val points = mutable.HashMap.empty[String, Int]

  def add(lane: String, bytes: Long): Unit = {
    val old = found.getOrElse(lane, Sample(SizeStats.Zero, 0L))
    found(lane) = Sample(old.stats.plus(SizeStats(1, bytes, bytes.toDouble * bytes)),
      math.max(old.largest, bytes))
  }

  def pointRead(lane: String): Unit = points(lane) = points.getOrElse(lane, 0) + 1

  def complete(of: Int): Map[String, Sample] =
    found.iterator.filter { case (lane, _) => points.getOrElse(lane, 0) == of }.toMap
}

/**
 * The per-partition size statistics of a Kafka source, kept under its checkpoint directory so that
 * a restarted query sizes its first batches from what it measured before. They only size batches:
 * offsets and recovery never depend on them, so the file is written after each batch's
 * measurements arrive and a missing or unreadable file just means starting without them. Writes
 * happen on a background thread, the latest statistics replacing any not yet written: a file's
 * create and rename through Spark's checkpoint file manager has a per-file cost (measured in
 * bench/windowstore/README.md) that must not be added to every batch.
 */
private[sluice] final class SizeFile(dir: String, hadoopConf: Configuration) {
  private val path = new Path(dir, SizeFile.Name)
  private lazy val fm = CheckpointFileManager.create(path.getParent, hadoopConf)

  def read(): Map[String, SizeStats] =
    try {
      if (!fm.exists(path)) Map.empty
      else {
        val in = fm.open(path)
        val root =
          try SizeFile.mapper.readTree(in)
          finally in.close()
        // Without the field (sluice 0.1.0): format 1. A lane is "topic/partition", never this name.
        val format = Option(root.get(SizeFile.FormatField)).map(_.asInt).getOrElse(1)
        if (!SizeFile.Format.reads.contains(format)) {
          SizeFile.log.warn(s"Ignoring record sizes: ${SizeFile.Format.refusal(path.toString, format.toString)}")
          return Map.empty
        }
        root.properties().asScala.filter(_.getKey != SizeFile.FormatField).map { e =>
          val a = e.getValue
          e.getKey -> SizeStats(a.get(0).asDouble, a.get(1).asDouble, a.get(2).asDouble)
        }.toMap
      }
    } catch {
      case NonFatal(e) => SizeFile.log.warn(s"Ignoring unreadable record sizes in $path", e); Map.empty
    }

  private val pending = new java.util.concurrent.atomic.AtomicReference[Map[String, SizeStats]]()

  /** Saves `stats` soon, in the background. */
  def save(stats: Map[String, SizeStats]): Unit = {
    if (pending.getAndSet(stats) == null) {
      SizeFile.writer.execute(() => Option(pending.getAndSet(null)).foreach(write))
    }
  }

  /** Waits (briefly) for saves already requested, e.g. before the query stops. */
  def flush(): Unit =
    try {
      SizeFile.writer.submit(new Runnable { def run(): Unit = () }).get(10, java.util.concurrent.TimeUnit.SECONDS)
    } catch {
      case NonFatal(e) => SizeFile.log.warn(s"Record sizes may not be saved to $path", e)
    }

  private[input] def write(stats: Map[String, SizeStats]): Unit =
    try {
      val root = SizeFile.mapper.createObjectNode()
      root.put(SizeFile.FormatField, SizeFile.Format.current)
      stats.toSeq.sortBy(_._1).foreach { case (lane, s) =>
        root.putArray(lane).add(s.count).add(s.sum).add(s.sumSq)
      }
      val out = fm.createAtomic(path, overwriteIfPossible = true)
      try out.write(SizeFile.mapper.writeValueAsString(root).getBytes(StandardCharsets.UTF_8))
      catch { case NonFatal(e) => out.cancel(); throw e }
      out.close()
    } catch {
      case NonFatal(e) => SizeFile.log.warn(s"Could not save record sizes to $path", e)
    }
}

private[sluice] object SizeFile {

  /** Not a number, so the source's own offset log in the same directory ignores it. */
  val Name = "sluice-record-sizes.json"
  private val FormatField = "formatVersion"
  private def Format = FileFormats.KafkaRecordSizes
  private val mapper = new ObjectMapper()
  private val log = LoggerFactory.getLogger(classOf[SizeFile])

  /** One daemon thread per JVM writes every source's size file, in order. */
  private lazy val writer = java.util.concurrent.Executors.newSingleThreadExecutor { r =>
    val t = new Thread(r, "sluice-record-sizes-writer")
    t.setDaemon(true)
    t
  }
}
