package sluice.spark

/**
 * What sluice reads from one entry of a query's offset log, in its own terms: the entry's format
 * differs between Spark minors (`SparkShim.offsetLogEntry`).
 */
final case class OffsetLogEntry(batchWatermarkMs: Long, batchTimestampMs: Long, conf: Map[String, String])
