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
  def supports(j: JsonToStructs, corruptRecordColumn: String): Boolean = refusal(j, corruptRecordColumn).isEmpty

  /** Why `j` cannot be replaced (see [[supports]]; the texts of the decoder's INFO line), or None where it can. */
  def refusal(j: JsonToStructs, corruptRecordColumn: String): Option[String] =
    if (j.options.nonEmpty) Some(Why.options(j.options.keys.toSeq.sorted))
    else if (j.child.dataType != StringType) Some(Why.input(j.child.dataType))
    else j.dataType match {
      case s: StructType if s.fieldNames.contains(corruptRecordColumn) => Some(Why.corruptRecord(corruptRecordColumn))
      case s: StructType => unreadable(s)
      case other => Some(Why.notStruct(other))
    }

  /** Why the decoder does not stand for Spark's parser on a `from_json` (the INFO line's texts). */
  object Why {
    def options(keys: Seq[String]): String = s"it has options (${keys.mkString(", ")}), which only Spark's parser reads"
    def input(t: DataType): String = s"its input is ${t.simpleString}, not a UTF8_BINARY string"
    def notStruct(t: DataType): String = s"its schema is ${t.simpleString}, not a struct"
    def corruptRecord(c: String): String =
      s"its schema has Spark's corrupt-record column $c, which Spark's parser fills"
    def duplicate(name: String): String = s"a struct of its schema has two fields named $name"
    def existsDefault(name: String): String = s"field $name has an existence default, which Spark's parser fills in"
    def unreadType(name: String, t: DataType): String =
      s"field $name is ${t.simpleString}, which the decoder does not read"
  }

  private def unreadable(s: StructType): Option[String] =
    s.fieldNames.diff(s.fieldNames.distinct).headOption.map(Why.duplicate).orElse(s.fields.iterator.map { f =>
        if (f.metadata.contains(ExistsDefault)) Some(Why.existsDefault(f.name))
        else if (RecordDecoder.kindOf(f.dataType) < 0) Some(Why.unreadType(f.name, f.dataType))
        else f.dataType match {
          case n: StructType => unreadable(n)
          case _ => None
        }
      }.collectFirst { case Some(why) => why })
}
