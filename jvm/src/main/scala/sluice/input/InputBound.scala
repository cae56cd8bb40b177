package sluice.input

import java.{util => ju}

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.catalyst.streaming.StreamingRelationV2
import org.apache.spark.sql.connector.catalog.{Column, SupportsRead, Table, TableCapability}
import org.apache.spark.sql.connector.expressions.Transform
import org.apache.spark.sql.connector.metric.{CustomMetric, CustomTaskMetric}
import org.apache.spark.sql.connector.read.{Batch, Scan, ScanBuilder}
import org.apache.spark.sql.connector.read.streaming.{ContinuousStream, MicroBatchStream}
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.util.CaseInsensitiveStringMap

import sluice.conf.{SluiceConf, SluiceConfException}
import sluice.spark.SourceTypes.RateStreamMicroBatchStream
import sluice.spark.SourceTypes.Source
import sluice.spark.SourceTypes.{DataSource, FileFormat}
import sluice.spark.SourceTypes.{FileStreamSource, StreamingRelation}
import sluice.spark.{DataSourceCopy, SourceTypes}

/** Where a source's bound comes from, resolved when the query creates the source. */
private[input] sealed trait BudgetSpec {
  def budgetFor(metadataPath: String): Budget = this match {
    case BudgetSpec.FromOption(bytes) => Budget.Fixed(bytes)
    case BudgetSpec.FromConf(bytes) => Budget.shared(bytes, metadataPath)
  }
}
private[input] object BudgetSpec {
  final case class FromOption(bytes: Long) extends BudgetSpec
  final case class FromConf(bytes: Long) extends BudgetSpec
}

/** The kinds of v2 source sluice bounds. */
private[input] sealed trait StreamKind
private[input] object StreamKind {
  final case class Kafka(defaultRecordBytes: Long) extends StreamKind
  final case class Rate(rowsPerSecond: Long) extends StreamKind
}

/**
 * KIP-770's `input.buffer.max.bytes` for Structured Streaming: an analyzer rule that puts every
 * streaming Kafka, rate and file source of a query behind a byte bound on what one micro-batch
 * admits. The sources stay what they are (same offsets, checkpoint layout and recovery); the
 * wrappers only lower the end offset each batch asks for.
 */
final class InputBoundRule(session: SparkSession) extends Rule[LogicalPlan] {
  import InputBoundRule._

  // resolveOperatorsDown, as Spark asks of analyzer rules: it skips subtrees analyzed already (a
  // DataFrame reused in another query), and Spark's test mode fails any plain transform here.
  // Idempotent: a bounded source is never wrapped again.
  override def apply(plan: LogicalPlan): LogicalPlan = if (!plan.isStreaming) plan else {
    plan.resolveOperatorsDown {
      case r: StreamingRelation if !r.dataSource.isInstanceOf[BoundedDataSource] && isFiles(r.dataSource) =>
        r.copy(dataSource = new BoundedDataSource(r.dataSource, spec(r.dataSource.options.get)))
      case r: StreamingRelationV2 if !r.table.isInstanceOf[BoundedTable] =>
        (r.table, kind(r)) match {
          case (t: SupportsRead, Some(k)) =>
            r.copy(table = new BoundedTable(t, k, spec(k => Option(r.extraOptions.get(k)))))
          case _ => r
        }
    }
  }

  private def isFiles(ds: DataSource): Boolean =
    scala.util.Try(classOf[FileFormat].isAssignableFrom(ds.providingClass)).getOrElse(false)

  private def kind(r: StreamingRelationV2): Option[StreamKind] =
    r.source.map(_.getClass.getName) match {
      case Some(KafkaProvider) => Some(StreamKind.Kafka(DefaultKafkaRecordBytes))
      case Some(RateProvider) =>
        Some(StreamKind.Rate(Option(r.extraOptions.get("rowsPerSecond")).map(_.trim.toLong).getOrElse(1L)))
      case _ => None
    }

  private def spec(option: String => Option[String]): BudgetSpec =
    option(Budget.SourceOption).orElse(option(Budget.SourceOption.toLowerCase)) match {
      case Some(v) =>
        BudgetSpec.FromOption(SluiceConf.parseBytes(v).filter(_ > 0).getOrElse(throw new SluiceConfException(
          s"Invalid value '$v' for source option ${Budget.SourceOption}: expected a byte size: a " +
            "plain number of bytes or a Spark byte string such as 64m or 1g, at least 1")))
      case None =>
        BudgetSpec.FromConf(SluiceConf(session.conf.getAll).inputBufferMaxBytes)
    }
}

object InputBoundRule {
  val KafkaProvider = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
  val RateProvider = SourceTypes.RateStreamProviderClass
  /**
   * The size assumed for a Kafka record when none could be measured or sampled: the broker's
   * default maximum batch size (message.max.bytes, about 1 MiB), so the first batch cannot
   * overshoot on any topic with default limits.
   */
  val DefaultKafkaRecordBytes: Long = 1L << 20
}

/** The v1 file source's DataSource, creating its source behind the bound. */
final class BoundedDataSource(ds: DataSource, spec: BudgetSpec) extends DataSourceCopy(ds) {
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
final class BoundedTable(val inner: Table with SupportsRead, kind: StreamKind, spec: BudgetSpec)
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
    val builder = inner.newScanBuilder(options)
    () => new BoundedScan(builder.build(), kind, spec, KafkaSampler.kafkaParams(options.asCaseSensitiveMap()))
  }
}

final class BoundedScan(inner: Scan, kind: StreamKind, spec: BudgetSpec,
    kafkaParams: Map[String, String] = Map.empty) extends Scan {
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
      case (StreamKind.Kafka(default), s) =>
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
