package sluice.input.internal

import java.{util => ju}

import org.apache.spark.sql.util.CaseInsensitiveStringMap

/**
 * A Kafka source's consumer fetches where the source leaves them to sluice: how much one poll of
 * a partition may fetch (`spark.sluice.input.fetch.max.bytes`), and how long the broker may hold
 * a fetch that finds nothing new ([[KafkaFetch.MicroBatchFetchMaxWaitMs]]).
 *
 * Spark's Kafka reader seeks to the next offset before every poll and looks the partition's
 * offset range up after it (`InternalKafkaConsumer.fetch`): the seek drops whatever the consumer
 * had fetched ahead, so each poll is one synchronous fetch plus two offset lookups, and it returns
 * at most `max.partition.fetch.bytes` (1 MiB in Kafka's defaults). On a backlog those round trips,
 * not the records, set the pace; a larger fetch per poll takes fewer of them. Only the consumer's
 * fetch size changes: which offsets a batch reads, and so every result, stays the source's own.
 *
 * Invariant: an option the user set on the source is never replaced.
 */
private[sluice] object KafkaFetch {
  val PartitionFetchBytesOption = "kafka.max.partition.fetch.bytes"
  val MaxPollRecordsOption = "kafka.max.poll.records"
  val FetchMaxWaitOption = "kafka.fetch.max.wait.ms"

  /**
   * How long the broker may hold a micro-batch's fetch that finds no new record (Kafka's default:
   * 500 ms). When a poll returns records, the consumer sends the next fetch ahead; the offset
   * lookups Spark's reader makes right after the poll go over the same connection, and a broker
   * answers one connection's requests in order. When a task reads to the end of a partition (the
   * last batch of a backlog, every batch of a quiet topic), that read-ahead finds nothing and the
   * lookups, and so the task, wait for it to be held the whole time. A micro-batch task only asks
   * for offsets it knows exist, so a shorter wait changes nothing else: at most one more empty
   * fetch per task. Real-time mode keeps Kafka's default: its reader polls on at the end of the
   * log without offset lookups, where a shorter wait only means more empty fetches.
   */
  val MicroBatchFetchMaxWaitMs = 10L

  /**
   * Records a poll may return per fetched byte: with `fetchBytes / MinRecordBytes` records a poll
   * returns a whole fetch of records of this size or more; smaller records only take more polls.
   */
  val MinRecordBytes = 64L

  /** Kafka's own `max.poll.records`; never lowered. */
  val KafkaMaxPollRecords = 500L

  /**
   * The fetch size for a source: the session's setting, but no more than the source's input
   * bound (a partition's fetch beyond what a batch may admit is read ahead of need). 0: Kafka's.
   */
  def fetchBytes(setting: Long, inputBound: Long): Long =
    if (setting <= 0) 0L else math.min(math.min(setting, inputBound), Int.MaxValue.toLong)

  /**
   * The source's options with the fetch settings it did not choose itself: the fetch size
   * (`fetchBytes`, 0: Kafka's) and, in a micro-batch query, the broker's wait for an empty fetch.
   */
  def withDefaults(options: CaseInsensitiveStringMap, fetchBytes: Long,
      microBatch: Boolean): CaseInsensitiveStringMap = {
    val added = new ju.HashMap[String, String](options.asCaseSensitiveMap())
    if (fetchBytes > 0) {
      val bytes = Option(options.get(PartitionFetchBytesOption)) match {
        case Some(own) => scala.util.Try(own.trim.toLong).getOrElse(0L)
        case None => added.put(PartitionFetchBytesOption, fetchBytes.toString); fetchBytes
      }
      if (!options.containsKey(MaxPollRecordsOption)) {
        added.put(MaxPollRecordsOption, math.max(KafkaMaxPollRecords, bytes / MinRecordBytes).toString)
      }
    }
    if (microBatch && !options.containsKey(FetchMaxWaitOption)) {
      added.put(FetchMaxWaitOption, MicroBatchFetchMaxWaitMs.toString)
    }
    if (added.size == options.size) options else new CaseInsensitiveStringMap(added)
  }
}
