package sluice.json.internal

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{BoundReference, Expression, JsonToStructs, UnaryExpression}
import org.apache.spark.sql.catalyst.expressions.codegen.{CodegenContext, ExprCode}
import org.apache.spark.sql.types.{DataType, StringType, StructType}
import org.apache.spark.unsafe.types.UTF8String

/**
 * Spark's `from_json` (`spark`, the expression this replaces) decoded by a [[RecordDecoder]]: the
 * same rows, with Spark's own parser deciding every record the decoder leaves to it. `decoded` is
 * the part of the schema the query reads ([[ReadFields]]); the fields outside it are null.
 */
private[json] final case class DirectJsonToStructs(child: Expression, spark: JsonToStructs, decoded: StructType)
    extends UnaryExpression {
  override def dataType: DataType = spark.dataType
  override def nullable: Boolean = spark.nullable
  override def prettyName: String = DirectJsonToStructs.Name

  def schema: StructType = dataType.asInstanceOf[StructType]

  @transient private lazy val decoder: RecordDecoder = {
    val sparkOnOneRecord = spark.withNewChildren(Seq(BoundReference(0, child.dataType, nullable = true)))
    new RecordDecoder(schema, decoded, record => sparkOnOneRecord.eval(InternalRow(record)).asInstanceOf[InternalRow])
  }

  // The plan shows what is decoded, `spark`'s schema being the type.
  override def stringArgs: Iterator[Any] = Iterator(child, decoded.simpleString)

  override protected def nullSafeEval(input: Any): Any = decoder.decode(input.asInstanceOf[UTF8String])

  override protected def doGenCode(ctx: CodegenContext, ev: ExprCode): ExprCode = {
    val d = ctx.addReferenceObj("jsonDecoder", decoder, classOf[RecordDecoder].getName)
    nullSafeCodeGen(ctx, ev, json => s"${ev.value} = $d.decode($json);\n${ev.isNull} = ${ev.value} == null;")
  }

  override protected def withNewChildInternal(newChild: Expression): DirectJsonToStructs = copy(child = newChild)
}

private[json] object DirectJsonToStructs {
  /** `spark` decoded whole: what the query reads is narrowed later, by [[ReadFields]]. */
  def apply(child: Expression, spark: JsonToStructs): DirectJsonToStructs =
    DirectJsonToStructs(child, spark, spark.dataType.asInstanceOf[StructType])

  /** The name plans show in place of `from_json`. */
  val Name = "sluice_from_json"

  /** Spark's metadata key of a field's existence default, which Spark's parser fills in for a missing field. */
  private val ExistsDefault = "EXISTS_DEFAULT"

  /**
   * Whether `j` can be replaced: no options (Spark's defaults are what [[RecordDecoder]] stands for),
   * UTF8_BINARY string input, a struct schema of the types the decoder reads, unique field names in
   * every struct, no existence defaults, and no field that is Spark's corrupt-record column
   * (`corruptRecordColumn`: Spark's parser fills that one with the raw record).
   */
  def supports(j: JsonToStructs, corruptRecordColumn: String): Boolean = j.options.isEmpty &&
    j.child.dataType == StringType && (j.dataType match {
      case s: StructType => !s.fieldNames.contains(corruptRecordColumn) && readable(s)
      case _ => false
    })

  private def readable(s: StructType): Boolean =
    s.fieldNames.distinct.length == s.fields.length && s.fields.forall { f =>
      !f.metadata.contains(ExistsDefault) && RecordDecoder.kindOf(f.dataType) >= 0 && (f.dataType match {
        case n: StructType => readable(n)
        case _ => true
      })
    }
}
