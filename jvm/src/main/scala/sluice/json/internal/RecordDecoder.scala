package sluice.json.internal

import java.nio.charset.StandardCharsets.UTF_8

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.Platform
import org.apache.spark.unsafe.types.UTF8String

/**
 * Decodes one JSON record into a row of `schema`, scanning the record's UTF-8 bytes once
 * ([[JsonScanner]]). Spark's `from_json` builds a Jackson parser per record over an
 * `InputStreamReader` (an 8 KB decoding buffer), canonicalises every field name, copies every string
 * into a text buffer and converts through general converters: for a Kafka value, most of a query's CPU.
 *
 * Invariant: `decode` returns exactly what Spark's `from_json` (`sparkParse`) returns for the same
 * record. It decodes a record itself only when the record is strict JSON (RFC 8259) in well-formed
 * UTF-8 whose values all have the JSON type Spark converts without question (an integer within the
 * type's range for an integral field, a number for a floating-point one, a string for a string field,
 * `true`/`false` for a boolean, an object for a struct field, or null); on anything else (malformed
 * input, a BOM, a NUL byte, a string for a number, a number for a string, a fraction for an integer,
 * JSON's non-standard forms Spark's parser allows) it hands the record to `sparkParse`. Why that is
 * enough: Spark's parser is more lenient than strict JSON (single quotes, NaN, `\'`), never stricter
 * within the limits the scanner keeps, and on strict JSON it reads the same characters; where its
 * conversion depends on the token (a number's width, a string's code points) the scanner gives the
 * value Jackson's getters give Spark, or rejects the record. [[DirectJsonToStructs.supports]] admits
 * only the schemas and options for which that holds.
 *
 * As Spark's parser: the first JSON value is read and what follows it ignored; a field the schema
 * lacks is skipped (its value checked, any type); a repeated field takes its last value; a field is
 * matched by its exact name.
 *
 * `decoded` is the part of `schema` the query reads (the same fields in the same order, some left
 * out; [[ReadFields]]). A field outside it is checked as if it were decoded, so that a record goes to
 * Spark's parser exactly when it would with the whole schema, but no value is built for it: it is
 * left null, which nothing in the query can see. On such a record `sparkParse` gives every field.
 */
private[json] final class RecordDecoder(schema: StructType, decoded: StructType,
    sparkParse: UTF8String => InternalRow)
  extends Serializable {
  import RecordDecoder._

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
    // A scanner per record: `decode` keeps no state between records, whichever thread calls it.
    val in = new JsonScanner(bytes, offset, offset + length)
    try {
      // Spark reads the first value only and ignores what follows it; so does this.
      if (in.peek() != '{') null
      else {
        in.advance()
        root.read(in, 1)
      }
    } catch {
      case JsonScanner.Rejected => null
    }
  }
}

private[json] object RecordDecoder {
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
    private val size = schema.length
    private val names: Array[Array[Byte]] = schema.fieldNames.map(_.getBytes(UTF_8))
    private val plain: Array[Boolean] = names.map(JsonScanner.plainName)
    private val kinds = schema.fields.map(f => kindOf(f.dataType))
    private val builds: Array[Boolean] =
      schema.fields.map(f => decoded != null && decoded.fieldNames.contains(f.name))
    private val nested: Array[StructReader] = schema.fields.zip(builds).map { case (f, build) =>
      f.dataType match {
        case s: StructType =>
          new StructReader(s, if (build) decoded(f.name).dataType.asInstanceOf[StructType] else null)
        case _ => null
      }
    }

    // The fields by name hash, open addressing: slot -> field index + 1, 0 for none.
    private val hashes = names.map(JsonScanner.hash)
    private val mask = Integer.highestOneBit(math.max(size, 1) * 4 - 1) * 2 - 1 // a power of two, 4+ slots a field
    private val slots: Array[Int] = {
      val t = new Array[Int](mask + 1)
      for (i <- 0 until size) {
        var s = hashes(i) & mask
        while (t(s) != 0) s = (s + 1) & mask
        t(s) = i + 1
      }
      t
    }

    /** The field the last name read is, or -1; `guess` (the field after the one before, records
     *  usually keeping the schema's order) is tried first, unless it is plain: `read` has then tried it. */
    private def field(in: JsonScanner, guess: Int): Int = {
      if (guess < size && !plain(guess) && in.nameIs(names(guess))) return guess
      val hash = in.nameHash
      var s = hash & mask
      while (true) {
        val e = slots(s)
        if (e == 0) return -1
        if (hashes(e - 1) == hash && in.nameIs(names(e - 1))) return e - 1
        s = (s + 1) & mask
      }
      -1
    }

    /** Reads an object, the scanner after its `{`, up to its `}`; `depth`: the object's nesting (the
     *  top-level one is 1). The row, or null where this reader only checks. */
    def read(in: JsonScanner, depth: Int): InternalRow = {
      if (depth > JsonScanner.MaxDepth) JsonScanner.reject()
      val row = if (decoded == null) null else new GenericInternalRow(size)
      if (in.peek() == '}') in.advance()
      else {
        var next = 0
        var more = true
        while (more) {
          if (in.peek() != '"') JsonScanner.reject()
          // Records usually keep the schema's order: the field after the last one is compared first.
          val i = if (next < size && plain(next) && in.nameIfIs(names(next))) next
          else { in.name(); field(in, next) }
          in.expect(':')
          // A field the schema lacks is skipped, as Spark does; a repeated one takes its last value, as Spark's.
          if (i < 0) in.skipValue(depth)
          else {
            val value = this.value(in, i, depth)
            if (builds(i)) row.update(i, value)
            next = i + 1
          }
          more = in.separator('}')
        }
      }
      row
    }

    /** The field's value, or null where it is not built: the checks are the same either way. */
    private def value(in: JsonScanner, i: Int, depth: Int): Any = {
      val c = in.peek()
      if (c == 'n') {
        in.literal(JsonScanner.Null)
        return null
      }
      val build = builds(i)
      (kinds(i): @annotation.switch) match {
        case KBool =>
          if (c == 't') in.literal(JsonScanner.True)
          else if (c == 'f') in.literal(JsonScanner.False)
          else JsonScanner.reject()
          if (build) c == 't' else null
        // The range checks are made even for a field not built: they decide whether Spark's parser does it.
        case KByte =>
          val v = integer(in, c)
          if (v < -128 || v > 255) JsonScanner.reject() // Jackson's getByteValue: [-128, 255], wrapped
          if (build) v.toByte else null
        case KShort =>
          val v = integer(in, c)
          if (v < Short.MinValue || v > Short.MaxValue) JsonScanner.reject()
          if (build) v.toShort else null
        case KInt =>
          val v = integer(in, c)
          if (v < Int.MinValue || v > Int.MaxValue) JsonScanner.reject()
          if (build) v.toInt else null
        case KLong =>
          val v = integer(in, c)
          if (build) v else null
        case KFloat =>
          number(in, c)
          if (build) in.floatValue else null
        case KDouble =>
          number(in, c)
          if (build) in.doubleValue else null
        case KStr =>
          if (c != '"') JsonScanner.reject()
          in.string(build)
        case KStruct =>
          if (c != '{') JsonScanner.reject()
          in.advance()
          nested(i).read(in, depth + 1)
        case _ => JsonScanner.reject()
      }
    }
  }

  /** Reads a number token, the scanner on its first byte `c`. */
  private def number(in: JsonScanner, c: Int): Unit = {
    if (c != '-' && (c < '0' || c > '9')) JsonScanner.reject()
    in.number()
  }

  /** Reads an integer token within a long (Jackson's VALUE_NUMBER_INT, `getLongValue`); rejects any other. */
  private def integer(in: JsonScanner, c: Int): Long = {
    number(in, c)
    if (!in.isIntegral) JsonScanner.reject()
    in.longValue
  }
}

/**
 * Whether a record's bytes are, byte for byte, the UTF-8 of the characters Spark's reader decodes
 * from them. Spark decodes them with Java's UTF-8 decoder, which replaces ill-formed sequences;
 * [[JsonScanner]] reads the bytes and takes a string's bytes as its value, which is what Spark's
 * String-to-UTF-8 conversion gives back only for well-formed input. So: every multi-byte sequence
 * well-formed (Unicode's table 3-7: no overlong form, no surrogate, at most U+10FFFF). And no NUL
 * byte and no leading BOM, which Spark's reader keeps as characters: the scanner would refuse both
 * (neither is JSON whitespace, a NUL in a string is a raw control character); refused here, in the
 * one test of which bytes are left to Spark whatever their JSON.
 */
private[json] object Utf8 {
  // Eight bytes at a time while they are ASCII other than NUL: no byte with its high bit, and no borrow
  // out of a byte (a zero one) on subtracting 1 from each. Where the platform reads unaligned longs.
  private final val High = 0x8080808080808080L
  private final val Ones = 0x0101010101010101L
  private val wide = Platform.unaligned()

  def plainWellFormed(b: Array[Byte], offset: Int, length: Int): Boolean = {
    val end = offset + length
    if (length >= 3 && b(offset) == 0xef.toByte && b(offset + 1) == 0xbb.toByte && b(offset + 2) == 0xbf.toByte) {
      return false
    }
    var i = offset
    while (i < end) {
      if (wide && end - i >= 8 && {
          val w = Platform.getLong(b, Platform.BYTE_ARRAY_OFFSET + i)
          ((w | (w - Ones)) & High) == 0
        }) i += 8
      else {
        val c = b(i)
        if (c > 0) i += 1
        else if (c == 0) return false
        else {
          val lead = c & 0xff
          // continuation bytes, and the allowed range of the first of them
          var n = 2
          var lo = 0x80
          var hi = 0xbf
          if (lead >= 0xc2 && lead <= 0xdf) n = 1
          else if (lead == 0xe0) lo = 0xa0
          else if (lead == 0xed) hi = 0x9f
          else if (lead >= 0xe1 && lead <= 0xef) ()
          else if (lead == 0xf0) { n = 3; lo = 0x90 }
          else if (lead >= 0xf1 && lead <= 0xf3) n = 3
          else if (lead == 0xf4) { n = 3; hi = 0x8f }
          else return false
          if (i + n >= end) return false
          val first = b(i + 1) & 0xff
          if (first < lo || first > hi) return false
          var k = 2
          while (k <= n) {
            if ((b(i + k) & 0xc0) != 0x80) return false
            k += 1
          }
          i += n + 1
        }
      }
    }
    true
  }
}
