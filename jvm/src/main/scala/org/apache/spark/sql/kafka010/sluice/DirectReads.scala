package org.apache.spark.sql.kafka010.sluice

import java.util.TimeZone

import org.apache.kafka.clients.consumer.ConsumerRecord
import org.apache.kafka.common.record.{TimestampType => KafkaTimestampType}

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.SpecificInternalRow
import org.apache.spark.sql.catalyst.util.RebaseDateTime
import org.apache.spark.sql.connector.metric.CustomTaskMetric
import org.apache.spark.sql.connector.read.{InputPartition, PartitionReader, PartitionReaderFactory}
import org.apache.spark.sql.connector.read.streaming.PartitionOffset
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeRead.RecordStatus
import org.apache.spark.sql.kafka010.{
  KafkaBatchInputPartition, KafkaOffsetRangeLimit, KafkaRecordToRowConverter,
  KafkaSourcePartitionOffset
}
import org.apache.spark.sql.kafka010.consumer.{KafkaDataConsumer, KafkaDataConsumerIterator}
import org.apache.spark.sql.vectorized.ColumnarBatch
import org.apache.spark.unsafe.types.UTF8String
import org.apache.spark.util.LongAccumulator

/**
 * Kafka records handed to a query as rows over the records' own fields, in micro-batches and in
 * real time (`spark.sluice.input.kafka.direct`; sluice.input builds the factory).
 *
 * Spark's Kafka reader builds every record into a generic row (a Seq turned into an array, the
 * topic's name encoded again, a `java.sql.Timestamp`, the default time zone cloned) and then copies
 * that row into an `UnsafeRow`, key and value bytes included. The copy serves nobody: Spark's planner
 * puts a projection over every micro-batch and real-time scan to make unsafe rows
 * (DataSourceV2Strategy, kept by RemoveRedundantProjects), and that projection copies again, the
 * columns the query reads. Here one mutable row per reader points at the current record's key and
 * value arrays, so only the projection copies, and only what it reads: a count by key never copies a
 * value.
 *
 * The rows are the ones Spark's reader makes (same columns, same timestamp rebase), read through the
 * same pooled consumer from the same offsets with the same data-loss handling, and the reader reports
 * Spark's two task metrics. The row is reused from record to record, as Spark's reader reuses its
 * `UnsafeRow`; a consumer keeping rows copies them, as it must already.
 *
 * In Spark's Kafka package because the input partition and the pooled consumer are private to it.
 */
object DirectReads {

  /**
   * Readers of `KafkaBatchInputPartition`s without headers; other partitions (a source with
   * `includeHeaders`, whose headers column Spark's reader builds) go to `fallback`, the factory
   * Spark's stream made. `records` counts the records the direct readers handed over.
   */
  def factory(fallback: PartitionReaderFactory, records: LongAccumulator): PartitionReaderFactory =
    new DirectReaderFactory(fallback, records)
}

private final class DirectReaderFactory(fallback: PartitionReaderFactory, records: LongAccumulator)
  extends PartitionReaderFactory {
  override def createReader(partition: InputPartition): PartitionReader[InternalRow] = partition match {
    case p: KafkaBatchInputPartition if !p.includeHeaders => new DirectReader(p, records)
    case other => fallback.createReader(other)
  }
  override def createColumnarReader(partition: InputPartition): PartitionReader[ColumnarBatch] =
    fallback.createColumnarReader(partition)
  override def supportColumnarReads(partition: InputPartition): Boolean = fallback.supportColumnarReads(partition)
}

/**
 * One topic-partition's offset range, read as Spark's reader reads it: in a micro-batch up to the
 * range's end; in real time (`RealTimeReads`) from its start on, record by record as they come, each
 * reported with its Kafka timestamp as its arrival time where that is a create or log-append time.
 */
private final class DirectReader(p: KafkaBatchInputPartition, records: LongAccumulator)
  extends RealTimeReads[InternalRow] {
  import DirectReader._

  private val consumer = KafkaDataConsumer.acquire(p.offsetRange.topicPartition, p.executorKafkaParams)
  private val (from, until) = resolveRange()
  private val zone = TimeZone.getDefault.getID
  private val row = new SpecificInternalRow(KafkaRecordToRowConverter.kafkaSchema(includeHeaders = false))
  row.update(Topic, UTF8String.fromString(p.offsetRange.topicPartition.topic))
  row.setInt(Partition, p.offsetRange.topicPartition.partition)
  private var nextOffset = from
  private var handed = 0L
  private var realTimeRecords: KafkaDataConsumerIterator = _

  override def next(): Boolean = nextOffset < until && {
    val record = consumer.get(nextOffset, until, p.pollTimeoutMs, p.failOnDataLoss)
    record != null && {
      fill(record)
      nextOffset = record.offset + 1
      handed += 1
      true
    }
  }

  override def nextRecord(timeoutMs: Long): RecordStatus = {
    if (realTimeRecords == null) realTimeRecords = consumer.getIterator(nextOffset)
    realTimeRecords.nextWithTimeout(timeoutMs) match {
      case Some(record) =>
        fill(record)
        nextOffset = record.offset + 1
        handed += 1
        record.timestampType match {
          case KafkaTimestampType.CREATE_TIME | KafkaTimestampType.LOG_APPEND_TIME =>
            RecordStatus.newStatusWithArrivalTimeMs(record.timestamp)
          case _ => RecordStatus.newStatusWithoutArrivalTime(true)
        }
      case None => RecordStatus.newStatusWithoutArrivalTime(false)
    }
  }

  override def getOffset(): PartitionOffset = KafkaSourcePartitionOffset(p.offsetRange.topicPartition, nextOffset)

  private def fill(r: ConsumerRecord[Array[Byte], Array[Byte]]): Unit = {
    row.update(Key, r.key)
    row.update(Value, r.value)
    row.setLong(Offset, r.offset)
    row.setLong(Timestamp, micros(r))
    row.setInt(TimestampType, r.timestampType.id)
  }

  /**
   * Spark's value: microseconds of `new java.sql.Timestamp(ms)` (exactly ms x 1000), rebased from the
   * Julian calendar in the JVM's default zone, which leaves any instant after the last calendar
   * switch as it is. The zone is read once per reader, not once per record.
   */
  private def micros(r: ConsumerRecord[_, _]): Long = {
    val us =
      try Math.multiplyExact(r.timestamp, 1000L)
      catch {
        case e: ArithmeticException => throw new IllegalStateException(
            s"Kafka record ${r.topic}-${r.partition} at offset ${r.offset} has a timestamp of ${r.timestamp} ms, " +
              "beyond what a Spark timestamp holds", e)
      }
    RebaseDateTime.rebaseJulianToGregorianMicros(zone, us)
  }

  override def get(): InternalRow = row

  // The names Spark's Kafka scan declares (its supportedCustomMetrics), so they add up in its metrics.
  override def currentMetricsValues(): Array[CustomTaskMetric] = Array(
    metric("offsetOutOfRange", consumer.getNumOffsetOutOfRange()),
    metric("dataLoss", consumer.getNumDataLoss()))

  override def close(): Unit = {
    records.add(handed)
    handed = 0
    consumer.release()
  }

  /** Offsets given as earliest or latest (a batch query's bounds) are resolved against the broker. */
  private def resolveRange(): (Long, Long) = {
    val range = p.offsetRange
    if (range.fromOffset >= 0 && range.untilOffset >= 0) (range.fromOffset, range.untilOffset)
    else {
      val available = consumer.getAvailableOffsetRange()
      require(range.fromOffset >= 0 || range.fromOffset == KafkaOffsetRangeLimit.EARLIEST,
        s"start offset ${range.fromOffset} of ${range.topicPartition} is neither an offset nor earliest")
      require(range.untilOffset >= 0 || range.untilOffset == KafkaOffsetRangeLimit.LATEST,
        s"end offset ${range.untilOffset} of ${range.topicPartition} is neither an offset nor latest")
      (if (range.fromOffset < 0) available.earliest else range.fromOffset,
        if (range.untilOffset < 0) available.latest else range.untilOffset)
    }
  }
}

private object DirectReader {
  // Kafka's source schema without headers (KafkaRecordToRowConverter.kafkaSchema).
  val Key = 0
  val Value = 1
  val Topic = 2
  val Partition = 3
  val Offset = 4
  val Timestamp = 5
  val TimestampType = 6

  def metric(metricName: String, v: Long): CustomTaskMetric = new CustomTaskMetric {
    override def name(): String = metricName
    override def value(): Long = v
  }
}
