package sluice.input.internal

import java.{util => ju}
import java.util.Optional

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.DataFrame
import org.apache.spark.sql.connector.read.streaming.{
  Offset => OffsetV2, ReadAllAvailable, ReadLimit, ReadMaxBytes, ReadMaxFiles, ReportsSourceMetrics,
  SupportsTriggerAvailableNow
}
import org.apache.spark.sql.types.StructType

import sluice.spark.SourceTypes.FileStreamSource
import sluice.spark.SourceTypes.{HadoopFsRelation, LogicalRelation, PartitioningAwareFileIndex}
import sluice.spark.SourceTypes.{Offset, Source}

/**
 * The file source with a byte bound. File sizes are known before reading, and Spark's file source
 * already selects files up to a byte limit (always at least one file), so the bound is handed to it
 * as `ReadMaxBytes`. The file source takes one limit per batch: with `maxFilesPerTrigger` set,
 * sluice instead lowers the file count to what fits the bound at the largest file size seen so far
 * (one file in the first batch, when nothing has been seen).
 */
private[sluice] final class BoundedFileSource(val inner: FileStreamSource, budget: Budget)
  extends Source with SupportsTriggerAvailableNow with ReportsSourceMetrics {

  @volatile private var largestFile = 0L
  @volatile private var lastBytes = 0L
  @volatile private var tightened = false

  override def schema: StructType = inner.schema
  override def getOffset: Option[Offset] = inner.getOffset
  override def commit(end: Offset): Unit = inner.commit(end)
  override def stop(): Unit = { budget.release(); inner.stop() }
  override def toString: String = inner.toString
  override def getDefaultReadLimit: ReadLimit = inner.getDefaultReadLimit
  override def reportLatestOffset(): OffsetV2 = inner.reportLatestOffset()
  override def prepareForTriggerAvailableNow(): Unit = inner.prepareForTriggerAvailableNow()

  override def latestOffset(start: OffsetV2, limit: ReadLimit): OffsetV2 = {
    val bound = budget.bytes
    val bounded = limit match {
      case _: ReadAllAvailable => ReadLimit.maxBytes(bound)
      case b: ReadMaxBytes => ReadLimit.maxBytes(math.min(b.maxBytes, bound))
      case f: ReadMaxFiles =>
        val fit = if (largestFile <= 0) 1L else math.max(1L, bound / largestFile)
        ReadLimit.maxFiles(math.min(f.maxFiles.toLong, fit).toInt)
      case other => other
    }
    tightened = bounded != limit
    // getBatch sets it when this batch reads from the source; a batch that does not reports 0.
    lastBytes = 0L
    inner.latestOffset(start, bounded)
  }

  override def getBatch(start: Option[Offset], end: Offset): DataFrame = {
    val df = inner.getBatch(start, end)
    // By field, not by position: LogicalRelation's arity has changed between Spark releases.
    val files = df.queryExecution.logical.collect { case r: LogicalRelation => r.relation }.collect {
      case fs: HadoopFsRelation => fs.location
    }.flatMap {
      case index: PartitioningAwareFileIndex => index.allFiles().map(_.getLen)
      case other => Seq(other.sizeInBytes)
    }
    lastBytes = files.sum
    if (files.nonEmpty) largestFile = math.max(largestFile, files.max)
    df
  }

  // Spark's file source does not say whether files were left waiting; the batch counts as throttled
  // when the bound, not the source's own limit, decided it and the next file seen could not fit.
  override def metrics(latestConsumedOffset: Optional[OffsetV2]): ju.Map[String, String] = {
    val throttled = tightened && lastBytes > 0 && lastBytes + largestFile > budget.bytes
    BoundedMicroBatchStream.metricsOf(lastBytes, if (throttled) 1 else 0).asJava
  }
}
