package sluice.json.internal

import scala.collection.mutable.ArrayBuffer

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.JsonToStructs
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.catalyst.trees.TreeNodeTag

import sluice.conf.SluiceConf
import sluice.rewrites.NotApplied

/**
 * With `spark.sluice.json.decoder=sluice`, every `from_json` that [[DirectJsonToStructs.supports]]
 * is decoded by sluice, building only the fields the query reads ([[ReadFields]]). An optimizer rule,
 * so that it also meets the copies of a `from_json` that Spark's own rules push into filters.
 *
 * Experimental (conf.json): each `from_json` it leaves to Spark is named, with why
 * ([[DirectJsonToStructs.Why]]), in one INFO line per plan; the expression is tagged once named, as
 * the rule meets it again in every iteration of the optimizer's batches and every micro-batch.
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
      val notes = ArrayBuffer.empty[(String, String)]
      val decoded = ReadFields(plan.transformAllExpressions {
        case j: JsonToStructs => DirectJsonToStructs.refusal(j, corrupt) match {
            case None => DirectJsonToStructs(j.child, j)
            case Some(why) =>
              if (j.getTagValue(JsonDecodeRule.Named).isEmpty) {
                j.setTagValue(JsonDecodeRule.Named, ())
                notes += NotApplied.shorten(s"from_json(${j.child.sql}, ${j.dataType.simpleString})") -> why
              }
              j
          }
      })
      NotApplied.log(session, JsonDecodeRule.Name, notes.toSeq)
      decoded
    }
}

private[sluice] object JsonDecodeRule {

  /** The rewrite's name in the lines saying why it left a `from_json` to Spark. */
  val Name = "the JSON decoder"

  /** Set on a `from_json` once a line has named it. */
  private val Named = TreeNodeTag[Unit]("sluice.json.named")
}
