package sluice.input.internal

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.catalyst.streaming.StreamingRelationV2
import org.apache.spark.sql.connector.catalog.SupportsRead

import sluice.conf.{SluiceConf, SluiceConfException}
import sluice.spark.SourceTypes.{DataSource, FileFormat}
import sluice.spark.SourceTypes.StreamingRelation
import sluice.spark.{SourceTypes, SparkNodes}

/**
 * KIP-770's `input.buffer.max.bytes` for Structured Streaming: an analyzer rule that puts every
 * streaming Kafka, rate and file source of a query behind a byte bound on what one micro-batch
 * admits. The sources stay what they are (same offsets, checkpoint layout and recovery); the
 * wrappers only lower the end offset each batch asks for.
 */
private[sluice] final class InputBoundRule(session: SparkSession) extends Rule[LogicalPlan] {
  import InputBoundRule._

  // resolveOperatorsDown, as Spark asks of analyzer rules: it skips subtrees analyzed already (a
  // DataFrame reused in another query), and Spark's test mode fails any plain transform here.
  // Idempotent: a bounded source is never wrapped again.
  override def apply(plan: LogicalPlan): LogicalPlan = if (!plan.isStreaming) plan
  else {
    lazy val conf = SluiceConf(session.conf.getAll)
    plan.resolveOperatorsDown {
      case r: StreamingRelation if !r.dataSource.isInstanceOf[BoundedDataSource] && isFiles(r.dataSource) =>
        SparkNodes.streamingRelationWith(r, new BoundedDataSource(r.dataSource, spec(conf, r.dataSource.options.get)))
      case r: StreamingRelationV2 if !r.table.isInstanceOf[BoundedTable] =>
        val bound = spec(conf, k => Option(r.extraOptions.get(k)))
        (r.table, kind(conf, r, bound)) match {
          case (t: SupportsRead, Some(k)) => SparkNodes.streamingRelationV2With(r, new BoundedTable(t, k, bound))
          case _ => r
        }
    }
  }

  private def isFiles(ds: DataSource): Boolean =
    scala.util.Try(classOf[FileFormat].isAssignableFrom(ds.providingClass)).getOrElse(false)

  private def kind(conf: SluiceConf, r: StreamingRelationV2, bound: BudgetSpec): Option[StreamKind] =
    r.source.map(_.getClass.getName) match {
      case Some(KafkaProvider) =>
        val fetch = KafkaFetch.fetchBytes(conf.inputFetchMaxBytes, bound.bytes)
        Some(StreamKind.Kafka(DefaultKafkaRecordBytes, fetch))
      case Some(RateProvider) =>
        Some(StreamKind.Rate(Option(r.extraOptions.get("rowsPerSecond")).map(_.trim.toLong).getOrElse(1L)))
      case _ => None
    }

  private def spec(conf: SluiceConf, option: String => Option[String]): BudgetSpec =
    option(Budget.SourceOption).orElse(option(Budget.SourceOption.toLowerCase)) match {
      case Some(v) =>
        BudgetSpec.FromOption(SluiceConf.parseBytes(v).filter(_ > 0).getOrElse(throw new SluiceConfException(
              s"Invalid value '$v' for source option ${Budget.SourceOption}: expected a byte size: a " +
                "plain number of bytes or a Spark byte string such as 64m or 1g, at least 1")))
      case None =>
        BudgetSpec.FromConf(conf.inputBufferMaxBytes)
    }
}

private[sluice] object InputBoundRule {

  val KafkaProvider = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
  val RateProvider = SourceTypes.RateStreamProviderClass

  /**
   * The size assumed for a Kafka record when none could be measured or sampled: the broker's
   * default maximum batch size (message.max.bytes, about 1 MiB), so the first batch cannot
   * overshoot on any topic with default limits.
   */
  val DefaultKafkaRecordBytes: Long = 1L << 20
}
