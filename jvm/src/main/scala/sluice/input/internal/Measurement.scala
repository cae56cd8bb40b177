package sluice.input.internal

import scala.collection.mutable

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.connector.metric.CustomTaskMetric
import org.apache.spark.sql.connector.read.{InputPartition, PartitionReader, PartitionReaderFactory}
import org.apache.spark.sql.vectorized.ColumnarBatch
import org.apache.spark.util.AccumulatorV2

/**
 * Sizes of the records tasks read, per lane, sent back to the driver: the driver sizes the next
 * batches from them and reports the bytes of the last one. Tasks add one entry per partition
 * reader (at close), so the per-record cost is three additions.
 */
private[sluice] final class LaneSizeAccumulator extends AccumulatorV2[(String, SizeStats), Map[String, SizeStats]] {
  private val stats = mutable.HashMap.empty[String, SizeStats]

  override def isZero: Boolean = stats.isEmpty
  override def copy(): LaneSizeAccumulator = {
    val c = new LaneSizeAccumulator
    stats.synchronized(c.stats ++= stats)
    c
  }
  override def reset(): Unit = stats.synchronized(stats.clear())
  override def add(v: (String, SizeStats)): Unit = stats.synchronized {
    val old = stats.getOrElse(v._1, SizeStats.Zero)
    stats(v._1) = old.plus(v._2)
  }
  override def merge(other: AccumulatorV2[(String, SizeStats), Map[String, SizeStats]]): Unit =
    other.value.foreach(add)
  override def value: Map[String, SizeStats] = stats.synchronized(stats.toMap)
}

/** Wraps Kafka's reader factory to measure key + value bytes of every record read. */
private[sluice] final class KafkaMeasuringReaderFactory(inner: PartitionReaderFactory, acc: LaneSizeAccumulator)
  extends PartitionReaderFactory {
  override def createReader(partition: InputPartition): PartitionReader[InternalRow] =
    new KafkaMeasuringReader(inner.createReader(partition), acc)
  override def createColumnarReader(partition: InputPartition): PartitionReader[ColumnarBatch] =
    inner.createColumnarReader(partition)
  override def supportColumnarReads(partition: InputPartition): Boolean =
    inner.supportColumnarReads(partition)
}

/**
 * Kafka rows are (key, value, topic, partition, ...); one reader reads one topic-partition.
 * Binary sizes are read from UnsafeRow's offset-and-size word, without copying the bytes.
 */
private[sluice] final class KafkaMeasuringReader(inner: PartitionReader[InternalRow], acc: LaneSizeAccumulator)
  extends PartitionReader[InternalRow] {
  private var lane: String = _
  private var count = 0L
  private var sum = 0.0
  private var sumSq = 0.0

  override def next(): Boolean = {
    val more = inner.next()
    if (more) {
      val row = inner.get()
      if (lane == null) lane = KafkaOffsets.laneKey(row.getUTF8String(2).toString, row.getInt(3))
      val bytes = binarySize(row, 0) + binarySize(row, 1)
      count += 1
      sum += bytes
      sumSq += bytes.toDouble * bytes
    }
    more
  }

  private def binarySize(row: InternalRow, i: Int): Long =
    if (row.isNullAt(i)) 0L
    else row match {
      case u: UnsafeRow => u.getLong(i) & 0xffffffffL
      case r => r.getBinary(i).length.toLong
    }

  override def get(): InternalRow = inner.get()
  override def currentMetricsValues(): Array[CustomTaskMetric] = inner.currentMetricsValues()

  override def close(): Unit = {
    if (lane != null && count > 0) acc.add(lane -> SizeStats(count.toDouble, sum, sumSq))
    count = 0
    inner.close()
  }
}
