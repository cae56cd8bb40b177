package sluice.json.internal

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.JsonToStructs
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.catalyst.rules.Rule

import sluice.conf.SluiceConf

/**
 * With `spark.sluice.json.decoder=sluice`, every `from_json` that [[DirectJsonToStructs.supports]]
 * is decoded by sluice, building only the fields the query reads ([[ReadFields]]). An optimizer rule,
 * so that it also meets the copies of a `from_json` that Spark's own rules push into filters.
 */
private[sluice] final case class JsonDecodeRule(session: SparkSession) extends Rule[LogicalPlan] {
  /** Spark's setting naming the corrupt-record column, and its default. */
  private val CorruptRecordKey = "spark.sql.columnNameOfCorruptRecord"
  private val CorruptRecordDefault = "_corrupt_record"

  // Runs in every iteration of the optimizer's fixed-point batches, for every query of the session:
  // it reads its one key, not a copy of the session's whole conf.
  override def apply(plan: LogicalPlan): LogicalPlan =
    if (SluiceConf(session.conf.getOption(SluiceConf.JsonDecoder.key).map(SluiceConf.JsonDecoder.key -> _))
        .get(SluiceConf.JsonDecoder) != SluiceConf.JsonDecoderSluice) plan
    else {
      val corrupt = session.conf.get(CorruptRecordKey, CorruptRecordDefault)
      ReadFields(plan.transformAllExpressions {
        case j: JsonToStructs if DirectJsonToStructs.supports(j, corrupt) => DirectJsonToStructs(j.child, j)
      })
    }
}
