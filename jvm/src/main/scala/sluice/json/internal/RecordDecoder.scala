package sluice.json.internal

import scala.util.control.{NoStackTrace, NonFatal}

import com.fasterxml.jackson.core.{JsonFactory, JsonParser, JsonToken}

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.Platform
import org.apache.spark.unsafe.types.UTF8String

/**
 * Decodes one JSON record into a row of `schema`, reading the record's UTF-8 bytes with Jackson's
 * byte parser. Spark's `from_json` wraps every record in an `InputStreamReader` (an 8 KB decoding
 * buffer per record) and converts through general converters; for a flat Kafka value that is most
 * of a query's CPU.
 *
 * Invariant: `decode` returns exactly what Spark's `from_json` (`sparkParse`) returns for the same
 * record. It decodes a record itself only when the record is strict JSON in well-formed UTF-8 whose
 * values all have the JSON type Spark converts without question (a number for a number field, a
 * string for a string field, an object for a struct field, or null); on anything else (malformed
 * input, a BOM, a NUL byte, a string for a number, a number for a string, JSON's non-standard forms
 * Spark's parser allows) it hands the record to `sparkParse`. Spark's own parser is more lenient
 * than this one (single quotes, NaN), never stricter, and reads the same characters: so where this
 * one succeeds, Spark's reaches the same values. [[DirectJsonToStructs.supports]] admits only the
 * schemas and options for which that holds.
 *
 * `decoded` is the part of `schema` the query reads (the same fields in the same order, some left
 * out; [[ReadFields]]). A field outside it is checked as if it were decoded, so that a record goes to
 * Spark's parser exactly when it would with the whole schema, but no value is built for it: it is
 * left null, which nothing in the query can see. On such a record `sparkParse` gives every field.
 */
private[json] final class RecordDecoder(schema: StructType, decoded: StructType,
    sparkParse: UTF8String => InternalRow) extends Serializable {
  import RecordDecoder._

  @transient private lazy val factory = new JsonFactory()
  @transient private lazy val root = new StructReader(schema, decoded)

  def decode(record: UTF8String): InternalRow = {
    val base = record.getBaseObject
    val decoded = base match {
      case bytes: Array[Byte] =>
        val offset = Math.toIntExact(record.getBaseOffset - Platform.BYTE_ARRAY_OFFSET)
        read(bytes, offset, record.numBytes())
      case _ =>
        val bytes = record.getBytes
        read(bytes, 0, bytes.length)
    }
    if (decoded ne null) decoded else sparkParse(record)
  }

  /** The row, or null where Spark's parser is to decide. */
  private def read(bytes: Array[Byte], offset: Int, length: Int): InternalRow = {
    if (!Utf8.plainWellFormed(bytes, offset, length)) return null
    try {
      val parser = factory.createParser(bytes, offset, length)
      try {
        // Spark reads the first value only and ignores what follows it; so does this.
        if (parser.nextToken() != JsonToken.START_OBJECT) null else root.read(parser)
      } finally parser.close()
    } catch {
      case NonFatal(_) => null
    }
  }
}

private[json] object RecordDecoder {
  /** Leaves a record to Spark's parser. Thrown, never seen outside `read`. */
  private object NotMine extends RuntimeException with NoStackTrace

  private final val KBool = 0
  private final val KByte = 1
  private final val KShort = 2
  private final val KInt = 3
  private final val KLong = 4
  private final val KFloat = 5
  private final val KDouble = 6
  private final val KStr = 7
  private final val KStruct = 8

  /** The kind of a field's type, or -1 where this decoder does not read it. */
  def kindOf(t: DataType): Int = t match {
    case BooleanType => KBool
    case ByteType => KByte
    case ShortType => KShort
    case IntegerType => KInt
    case LongType => KLong
    case FloatType => KFloat
    case DoubleType => KDouble
    case s: StringType if s == StringType => KStr // UTF8_BINARY only: Spark converts collated strings itself
    case _: StructType => KStruct
    case _ => -1
  }

  /** One struct's fields by name, and a reader for each. Field names are unique (checked by `supports`).
   *  `decoded`: the fields to build values for (see the class), or null to only check the object. */
  private final class StructReader(schema: StructType, decoded: StructType) {
    private val index = new java.util.HashMap[String, Integer]()
    schema.fields.zipWithIndex.foreach { case (f, i) => index.put(f.name, i) }
    private val kinds = schema.fields.map(f => kindOf(f.dataType))
    private val builds: Array[Boolean] =
      schema.fields.map(f => decoded != null && decoded.fieldNames.contains(f.name))
    private val nested: Array[StructReader] = schema.fields.zip(builds).map { case (f, build) =>
      f.dataType match {
        case s: StructType => new StructReader(s, if (build) decoded(f.name).dataType.asInstanceOf[StructType] else null)
        case _ => null
      }
    }

    /** Reads an object, the parser on its START_OBJECT; leaves it on the END_OBJECT. The row, or null
     *  where this reader only checks. */
    def read(p: JsonParser): InternalRow = {
      val row = if (decoded == null) null else new GenericInternalRow(kinds.length)
      var t = p.nextToken()
      while (t == JsonToken.FIELD_NAME) {
        val i = index.get(p.currentName())
        val v = p.nextToken()
        // A field the schema lacks is skipped, as Spark does; a repeated one takes its last value, as Spark's.
        if (i eq null) p.skipChildren()
        else {
          val value = this.value(p, v, i.intValue())
          if (builds(i.intValue())) row.update(i.intValue(), value)
        }
        t = p.nextToken()
      }
      if (t != JsonToken.END_OBJECT) throw NotMine
      row
    }

    /** The field's value, or where it is not built, anything: the checks are the same either way. */
    private def value(p: JsonParser, t: JsonToken, i: Int): Any = {
      if (t == JsonToken.VALUE_NULL) return null
      (kinds(i): @annotation.switch) match {
        case KBool =>
          if (t == JsonToken.VALUE_TRUE) true else if (t == JsonToken.VALUE_FALSE) false else throw NotMine
        // The integer getters are called even for a field not built: they are the range check.
        case KByte => if (t == JsonToken.VALUE_NUMBER_INT) p.getByteValue else throw NotMine
        case KShort => if (t == JsonToken.VALUE_NUMBER_INT) p.getShortValue else throw NotMine
        case KInt => if (t == JsonToken.VALUE_NUMBER_INT) p.getIntValue else throw NotMine
        case KLong => if (t == JsonToken.VALUE_NUMBER_INT) p.getLongValue else throw NotMine
        case KFloat => if (isNumber(t)) p.getFloatValue else throw NotMine
        case KDouble => if (isNumber(t)) p.getDoubleValue else throw NotMine
        // A string not built is never read: Jackson then skips its text, checking it as it reads it.
        case KStr => if (t != JsonToken.VALUE_STRING) throw NotMine else if (builds(i)) string(p) else null
        case KStruct => if (t == JsonToken.START_OBJECT) nested(i).read(p) else throw NotMine
        case _ => throw NotMine
      }
    }
  }

  /** The current string value as Spark's parser converts it (`UTF8String.fromString(getText)`), without
   *  the intermediate String where the text is ASCII. */
  private def string(p: JsonParser): UTF8String = {
    val chars = p.getTextCharacters
    val from = p.getTextOffset
    val n = p.getTextLength
    val bytes = new Array[Byte](n)
    var i = 0
    while (i < n) {
      val c = chars(from + i)
      if (c >= 0x80) return UTF8String.fromString(new String(chars, from, n))
      bytes(i) = c.toByte
      i += 1
    }
    UTF8String.fromBytes(bytes)
  }

  private def isNumber(t: JsonToken): Boolean = t == JsonToken.VALUE_NUMBER_INT || t == JsonToken.VALUE_NUMBER_FLOAT
}

/**
 * Whether a record's bytes read the same through Jackson's byte parser as through Spark's reader.
 * Spark decodes them with Java's UTF-8 decoder, which replaces ill-formed sequences; Jackson's byte
 * parser would reject some and pass others through differently, and it detects UTF-16/32 from NUL
 * bytes and strips a leading UTF-8 BOM that Spark's reader keeps. So: no NUL byte, no leading BOM,
 * and every multi-byte sequence well-formed (Unicode's table 3-7: no overlong form, no surrogate, at
 * most U+10FFFF), where both decoders give the same characters.
 */
private[json] object Utf8 {
  def plainWellFormed(b: Array[Byte], offset: Int, length: Int): Boolean = {
    val end = offset + length
    if (length >= 3 && b(offset) == 0xEF.toByte && b(offset + 1) == 0xBB.toByte && b(offset + 2) == 0xBF.toByte) {
      return false
    }
    var i = offset
    while (i < end) {
      val c = b(i)
      if (c > 0) i += 1
      else if (c == 0) return false
      else {
        val lead = c & 0xFF
        // (continuation bytes, the allowed range of the first of them)
        val (n, lo, hi) =
          if (lead >= 0xC2 && lead <= 0xDF) (1, 0x80, 0xBF)
          else if (lead == 0xE0) (2, 0xA0, 0xBF)
          else if (lead == 0xED) (2, 0x80, 0x9F)
          else if (lead >= 0xE1 && lead <= 0xEF) (2, 0x80, 0xBF)
          else if (lead == 0xF0) (3, 0x90, 0xBF)
          else if (lead >= 0xF1 && lead <= 0xF3) (3, 0x80, 0xBF)
          else if (lead == 0xF4) (3, 0x80, 0x8F)
          else return false
        if (i + n >= end) return false
        val first = b(i + 1) & 0xFF
        if (first < lo || first > hi) return false
        var k = 2
        while (k <= n) {
          if ((b(i + k) & 0xC0) != 0x80) return false
          k += 1
        }
        i += n + 1
      }
    }
    true
  }
}
