package sluice.suppress

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.{DataFrame, SparkSession}
import org.apache.spark.sql.types.StructType

import sluice.conf.SluiceConf

/**
 * Where `untilWindowCloses` keeps the records it drops as late (Flink's `sideOutputLateData`,
 * SPARK-24634): every input record of the aggregation whose window had already closed when it
 * arrived — closed by the window's grace period, or by Spark's watermark — is written, instead of
 * only counted, to `path` in Spark file format `format` (`parquet`, `json`, `orc`, `csv`) with
 * `options` as a batch write would take them.
 *
 * Each micro-batch's late records land under `path/batch_id=<id>/`, one file per task that had
 * some; a replayed batch rewrites the same files, so every late record is kept exactly once. A
 * session window's record is judged by the session it merges into when the grace is below the
 * watermark delay; under the real-time trigger a batch's files appear when the batch ends. A record
 * carries the aggregation's input columns (its window, grouping keys, event time and aggregated
 * values) and `late_by_ms`: how far stream time was past the window's close (its end plus the
 * grace) when the record came. Their number is the batch's late-drop count: the suppress
 * operator's `lateRecordDropTotal`, or on the fused plan the aggregation's
 * `numRowsDroppedByWatermark`.
 */
final case class LateRecords(path: String, format: String = "parquet", options: Map[String, String] = Map.empty) {
  if (path == null || path.trim.isEmpty) throw new IllegalArgumentException("late records need a path")
  if (format == null || format.trim.isEmpty) throw new IllegalArgumentException("late records need a format")
  def describe: String = s"late records to $path ($format)"
}

object LateRecords {

  /** The column each kept record carries besides the aggregation's input columns. */
  val LateByColumn = "late_by_ms"

  /** The partition column of the directory each batch's records land in. */
  val BatchColumn = "batch_id"

  def of(path: String, format: String, options: java.util.Map[String, String]): LateRecords =
    LateRecords(path, format, Option(options).map(_.asScala.toMap).getOrElse(Map.empty))

  /**
   * The records kept at `path` by the query whose checkpoint location is `checkpoint`, as a
   * streaming DataFrame (`format` and `options` as the query writes them): each of its
   * micro-batches has the records of the query's batches committed since its last one, with their
   * columns and [[BatchColumn]], the query's batch that kept them. A batch is offered only once
   * the query has committed it, so no record is read that a rerun could rewrite. Write it with
   * `writeStream.foreachBatch` or to Delta, under its own checkpoint, for exactly-once delivery.
   *
   * The columns come from the file the query writes beside the records before its first batch;
   * until that query has run a batch, give them as `schema`. Fails here when `checkpoint` is no
   * streaming checkpoint, when the records at `path` are another format or kept by another query,
   * or when `schema` is not theirs.
   */
  def stream(spark: SparkSession, path: String, checkpoint: String, format: String = "parquet",
      options: Map[String, String] = Map.empty, schema: Option[StructType] = None): DataFrame = {
    val reader = spark.readStream.format(SluiceConf.LateRecordsSource).options(options)
      .option(SluiceConf.LateRecordsCheckpointOption, checkpoint).option(SluiceConf.LateRecordsFormatOption, format)
    schema.fold(reader)(reader.schema).load(path)
  }
}
