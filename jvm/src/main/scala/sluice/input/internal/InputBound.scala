package sluice.input.internal

import java.{util => ju}

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.connector.catalog.{Column, SupportsRead, Table, TableCapability}
import org.apache.spark.sql.connector.expressions.Transform
import org.apache.spark.sql.connector.metric.{CustomMetric, CustomTaskMetric}
import org.apache.spark.sql.connector.read.{Batch, Scan, ScanBuilder}
import org.apache.spark.sql.connector.read.streaming.{ContinuousStream, MicroBatchStream}
import org.apache.spark.sql.sluice.StatefulOperatorSupport
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.util.CaseInsensitiveStringMap

import sluice.spark.SourceTypes.RateStreamMicroBatchStream
import sluice.spark.SourceTypes.Source
import sluice.spark.SourceTypes.DataSource
import sluice.spark.SourceTypes.FileStreamSource
import sluice.spark.{DataSourceCopy, RealTimePlans}

/** Where a source's bound comes from, resolved when the query creates the source. */
private[sluice] sealed trait BudgetSpec {

  /** The bound set for the source, or the query-wide one its sources share. */
  def bytes: Long
  def budgetFor(metadataPath: String): Budget = this match {
    case BudgetSpec.FromOption(bytes) => Budget.Fixed(bytes)
    case BudgetSpec.FromConf(bytes) => Budget.shared(bytes, metadataPath)
  }
}

private[sluice] object BudgetSpec {
  final case class FromOption(bytes: Long) extends BudgetSpec
  final case class FromConf(bytes: Long) extends BudgetSpec
}

/** The kinds of v2 source sluice bounds. */
private[sluice] sealed trait StreamKind

private[sluice] object StreamKind {

  /** `fetchBytes`: what one poll of a partition may fetch where the source leaves it (0: Kafka's default). */
  final case class Kafka(defaultRecordBytes: Long, fetchBytes: Long) extends StreamKind
  final case class Rate(rowsPerSecond: Long) extends StreamKind
}

/** The v1 file source's DataSource, creating its source behind the bound. */
private[sluice] final class BoundedDataSource(ds: DataSource, spec: BudgetSpec) extends DataSourceCopy(ds) {
  // DataSource is a case class: without these, the bounded copy equals the original and tree
  // transforms keep the original.
  override def canEqual(that: Any): Boolean = that.isInstanceOf[BoundedDataSource]
  override def equals(that: Any): Boolean = that.isInstanceOf[BoundedDataSource] && super.equals(that)
  override def hashCode(): Int = super.hashCode() * 31 + 7

  override def createSource(metadataPath: String): Source = super.createSource(metadataPath) match {
    case files: FileStreamSource => new BoundedFileSource(files, spec.budgetFor(metadataPath))
    case other => other
  }
}

/** A v2 table whose micro-batch streams are bounded; everything else is the table's own. */
private[sluice] final class BoundedTable(val inner: Table with SupportsRead, kind: StreamKind, spec: BudgetSpec)
  extends Table with SupportsRead {
  override def name(): String = inner.name()
  @deprecated("delegates to a deprecated method", "")
  override def schema(): StructType = inner.schema()
  override def columns(): Array[Column] = inner.columns()
  override def partitioning(): Array[Transform] = inner.partitioning()
  override def properties(): ju.Map[String, String] = inner.properties()
  override def capabilities(): ju.Set[TableCapability] = inner.capabilities()
  override def toString: String = inner.toString

  override def newScanBuilder(options: CaseInsensitiveStringMap): ScanBuilder = {
    val read = kind match {
      case StreamKind.Kafka(_, fetchBytes) => KafkaFetch.withDefaults(options, fetchBytes, BoundedTable.microBatch)
      case _ => options
    }
    val builder = inner.newScanBuilder(read)
    // The driver's size sampling reads a few records with the source's own options.
    () => new BoundedScan(builder.build(), kind, spec, KafkaSampler.kafkaParams(options.asCaseSensitiveMap()))
  }
}

private object BoundedTable {

  /**
   * Whether the query whose stream thread builds this scan runs micro-batches (not real-time or
   * continuous processing). Spark builds a streaming scan only on that thread, when the query
   * starts; should no query be found there, micro-batches, the common case, are assumed.
   */
  def microBatch: Boolean =
    StatefulOperatorSupport.currentStream(SparkSession.active).forall(RealTimePlans.runsMicroBatches)
}

private[sluice] final class BoundedScan(inner: Scan, kind: StreamKind, spec: BudgetSpec,
    kafkaParams: Map[String, String] = Map.empty)
  extends Scan {
  override def readSchema(): StructType = inner.readSchema()
  override def description(): String = inner.description()
  override def toBatch: Batch = inner.toBatch
  override def toContinuousStream(checkpointLocation: String): ContinuousStream =
    inner.toContinuousStream(checkpointLocation)
  override def supportedCustomMetrics(): Array[CustomMetric] = inner.supportedCustomMetrics()
  override def reportDriverMetrics(): Array[CustomTaskMetric] = inner.reportDriverMetrics()
  override def columnarSupportMode(): Scan.ColumnarSupportMode = inner.columnarSupportMode()

  override def toMicroBatchStream(checkpointLocation: String): MicroBatchStream = {
    val stream = inner.toMicroBatchStream(checkpointLocation)
    val lanes: Option[Lanes] = (kind, stream) match {
      case (StreamKind.Kafka(default, _), s) =>
        val hadoopConf = SparkSession.active.sparkContext.hadoopConfiguration
        Some(new KafkaLanes(s, default, Some(new KafkaSampler(kafkaParams)),
            Some(new SizeFile(checkpointLocation, hadoopConf))))
      case (StreamKind.Rate(rps), _: RateStreamMicroBatchStream) => Some(new RateLanes(rps))
      case _ => None
    }
    lanes.map(l => new BoundedMicroBatchStream(stream, l, spec.budgetFor(checkpointLocation)))
      .getOrElse(stream)
  }
}
