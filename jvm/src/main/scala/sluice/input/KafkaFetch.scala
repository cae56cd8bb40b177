package sluice.input

import java.{util => ju}

import org.apache.spark.sql.util.CaseInsensitiveStringMap

/**
 * How much one poll of a Kafka partition may fetch, for the sources that leave it to sluice
 * (`spark.sluice.input.fetch.max.bytes`).
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
object KafkaFetch {
  val PartitionFetchBytesOption = "kafka.max.partition.fetch.bytes"
  val MaxPollRecordsOption = "kafka.max.poll.records"

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

  /** The source's options with the fetch settings it did not choose itself. */
  def withDefaults(options: CaseInsensitiveStringMap, fetchBytes: Long): CaseInsensitiveStringMap = {
    if (fetchBytes <= 0) return options
    val added = new ju.HashMap[String, String](options.asCaseSensitiveMap())
    val bytes = Option(options.get(PartitionFetchBytesOption)) match {
      case Some(own) => scala.util.Try(own.trim.toLong).getOrElse(0L)
      case None => added.put(PartitionFetchBytesOption, fetchBytes.toString); fetchBytes
    }
    if (!options.containsKey(MaxPollRecordsOption)) {
      added.put(MaxPollRecordsOption, math.max(KafkaMaxPollRecords, bytes / MinRecordBytes).toString)
    }
    if (added.size == options.size) options else new CaseInsensitiveStringMap(added)
  }
}
