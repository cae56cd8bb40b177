package sluice.json.internal

import java.nio.charset.StandardCharsets.{ISO_8859_1, UTF_8}
import java.util.Arrays

import scala.util.control.NoStackTrace

import org.apache.spark.unsafe.types.UTF8String

/**
 * A cursor over one record's UTF-8 bytes, reading JSON tokens as RFC 8259 writes them and nothing
 * else: whitespace is space, tab, line feed and carriage return; a string has no raw character below
 * U+0020 and only the escapes `\" \\ \/ \b \f \n \r \t \uXXXX`; a number has no leading zero, no
 * leading `+`, no bare `.` and no NaN or Infinity. Wherever the bytes leave that grammar it throws
 * [[JsonScanner.Rejected]]: [[RecordDecoder]] leaves such a record to Spark's parser, which is more
 * lenient (single quotes, `\'`, NaN) and decides it its own way.
 *
 * It also rejects what Spark's Jackson parser would refuse under its default stream limits (numbers
 * of 1000 characters, nesting 1000 deep, names of 50,000 and strings of 20,000,000 characters), with a
 * wide margin: those records then go to Spark's parser, which fails them as it does.
 *
 * The values are those Jackson's getters give Spark's parser (`getLongValue`, `getDoubleValue`,
 * `getFloatValue`, `getText`), so that a record decoded here reads the same as through Spark:
 *  - an integer token that fits a long has that long's value, also as a double or float (a cast, as
 *    Jackson's: `-0` is 0.0, not -0.0); a longer one, and every token with a fraction or exponent, is
 *    `Double.parseDouble` / `Float.parseFloat` of its text, as Jackson parses it (Spark does not turn
 *    on Jackson's fast parser). A short decimal is computed directly where that is exact: at most 15
 *    significant digits times a power of ten up to 1e22 for a double (7 digits, 1e10 for a float), a
 *    single correctly rounded operation on exact operands, the same value the JDK's parser returns;
 *  - a string is its bytes with the escapes decoded: the bytes are well-formed UTF-8 (checked before,
 *    [[Utf8.plainWellFormed]]), so they are what Spark's `UTF8String.fromString(getText)` encodes
 *    again. A `\u` surrogate pair is one code point; a lone surrogate is rejected (Spark's encoder
 *    writes `?` for it).
 *  - a field name with an escape is rejected: names are compared as raw bytes.
 */
private[json] final class JsonScanner(b: Array[Byte], start: Int, end: Int) {
  import JsonScanner._

  private var pos = start

  // The last name read: its bytes, between the quotes.
  private var nameFrom = 0
  private var nameTo = 0

  // The last number read: its text, its sign, whether it is an integer token (no fraction, no
  // exponent), its significant digits (the first 19 of them as an unsigned long) and the decimal
  // exponent that scales those digits to the value.
  private var numFrom = 0
  private var numTo = 0
  private var negative = false
  private var integral = false
  private var mantissa = 0L
  private var significant = 0
  private var exp10 = 0

  /** Skips whitespace: the next byte (not consumed), or -1 at the end. */
  def peek(): Int = {
    while (pos < end) {
      val c = b(pos)
      if (c == ' ' || c == '\n' || c == '\r' || c == '\t') pos += 1
      else return c & 0xff
    }
    -1
  }

  /** Consumes the byte `peek` returned. */
  def advance(): Unit = pos += 1

  /** Consumes whitespace and then `c`; rejects anything else. */
  def expect(c: Char): Unit = {
    if (peek() != c) reject()
    pos += 1
  }

  /** Reads `true`, `false` or `null`, the cursor on its first byte. */
  def literal(word: Array[Byte]): Unit = {
    val n = word.length
    if (end - pos < n) reject()
    var k = 0
    while (k < n) {
      if (b(pos + k) != word(k)) reject()
      k += 1
    }
    pos += n
  }

  /** Reads a field name, the cursor on its opening quote, up to its closing quote. */
  def name(): Unit = {
    val from = pos + 1
    var i = from
    var c: Byte = 0
    while ({ if (i >= end) reject(); c = b(i); c != '"' }) {
      if (c == '\\' || (c & 0xe0) == 0) reject()
      i += 1
    }
    if (i - from > MaxNameBytes) reject()
    nameFrom = from
    nameTo = i
    pos = i + 1
  }

  /** Whether the last name read is `name` (UTF-8). */
  def nameIs(name: Array[Byte]): Boolean = Arrays.equals(b, nameFrom, nameTo, name, 0, name.length)

  /**
   * Reads the field name at the cursor (on its opening quote), as [[name]] does, if it is `name`;
   * otherwise consumes nothing. `name` must be [[JsonScanner.plainName]]: then its bytes followed by
   * a quote are a name [[name]] would accept, so one comparison replaces the scan. For the name a
   * record most likely has next.
   */
  def nameIfIs(name: Array[Byte]): Boolean = {
    val from = pos + 1
    val to = from + name.length
    if (to >= end || b(to) != '"' || !Arrays.equals(b, from, to, name, 0, name.length)) false
    else {
      nameFrom = from
      nameTo = to
      pos = to + 1
      true
    }
  }

  /** The last name's [[JsonScanner.hash]]. */
  def nameHash: Int = {
    var h = 0
    var k = nameFrom
    while (k < nameTo) {
      h = 31 * h + b(k)
      k += 1
    }
    h
  }

  /** Reads a string, the cursor on its opening quote: its value where `build`, else null; checked either way. */
  def string(build: Boolean): UTF8String = {
    val from = pos + 1
    var i = from
    var escaped = false
    var c: Byte = 0
    while ({ if (i >= end) reject(); c = b(i); c != '"' }) {
      if (c == '\\') {
        escaped = true
        i += 2 // the escaped byte is checked by `unescape`; it is never the closing quote
      } else {
        if ((c & 0xe0) == 0) reject() // a raw control character
        i += 1
      }
    }
    pos = i + 1
    if (i - from > MaxStringBytes) reject()
    if (!escaped) {
      if (build) UTF8String.fromBytes(Arrays.copyOfRange(b, from, i)) else null
    } else {
      // Decoded, a string is never longer than its text.
      val out = if (build) new Array[Byte](i - from) else null
      val n = unescape(from, i, out)
      if (build) UTF8String.fromBytes(out, 0, n) else null
    }
  }

  /** Decodes the string text b[from, to) into `out` (where not null): its length. Rejects a bad escape. */
  private def unescape(from: Int, to: Int, out: Array[Byte]): Int = {
    var i = from
    var n = 0
    while (i < to) {
      val c = b(i)
      if (c != '\\') {
        if (out ne null) out(n) = c
        n += 1
        i += 1
      } else {
        val e = b(i + 1) // within the text: the scan stepped over it
        i += 2
        var cp = (e.toInt: @annotation.switch) match {
          case '"' | '\\' | '/' => e.toInt
          case 'b' => '\b'.toInt
          case 'f' => '\f'.toInt
          case 'n' => '\n'.toInt
          case 'r' => '\r'.toInt
          case 't' => '\t'.toInt
          case 'u' =>
            val u = hex4(i, to)
            i += 4
            u
          case _ => reject()
        }
        if (cp >= 0xd800 && cp <= 0xdfff) {
          // Only a high surrogate escape followed by a low one: a lone one would not survive Spark's encoder.
          if (cp >= 0xdc00 || to - i < 6 || b(i) != '\\' || b(i + 1) != 'u') reject()
          val low = hex4(i + 2, to)
          if (low < 0xdc00 || low > 0xdfff) reject()
          i += 6
          cp = Character.toCodePoint(cp.toChar, low.toChar)
        }
        if (out ne null) n = utf8(cp, out, n)
        else n += (if (cp < 0x80) 1 else if (cp < 0x800) 2 else if (cp < 0x10000) 3 else 4)
      }
    }
    n
  }

  /** The four hex digits at b[i, i + 4), all before `to`. */
  private def hex4(i: Int, to: Int): Int = {
    if (to - i < 4) reject()
    (hex(b(i)) << 12) | (hex(b(i + 1)) << 8) | (hex(b(i + 2)) << 4) | hex(b(i + 3))
  }

  /** Reads a number, the cursor on its first byte; its value through `longValue`, `doubleValue` or `floatValue`. */
  def number(): Unit = {
    val from = pos
    var i = from
    val neg = b(i) == '-'
    if (neg) i += 1
    var m = 0L
    var sig = 0 // significant digits: leading zeros do not count
    var fraction = 0 // digits after the point
    var c = at(i)
    if (c == '0') {
      i += 1
      c = at(i)
      if (isDigit(c)) reject() // a leading zero
    } else if (isDigit(c)) {
      while (isDigit(c)) {
        if (sig < 19) m = m * 10 + (c - '0')
        sig += 1
        i += 1
        c = at(i)
      }
    } else reject()
    var isInt = true
    if (c == '.') {
      isInt = false
      i += 1
      c = at(i)
      if (!isDigit(c)) reject()
      while (isDigit(c)) {
        if (sig > 0 || c != '0') {
          if (sig < 19) m = m * 10 + (c - '0')
          sig += 1
        }
        fraction += 1
        i += 1
        c = at(i)
      }
    }
    var exp = 0
    if (c == 'e' || c == 'E') {
      isInt = false
      i += 1
      c = at(i)
      val expNeg = c == '-'
      if (c == '-' || c == '+') {
        i += 1
        c = at(i)
      }
      if (!isDigit(c)) reject()
      while (isDigit(c)) {
        if (exp < 100000) exp = exp * 10 + (c - '0')
        i += 1
        c = at(i)
      }
      if (expNeg) exp = -exp
    }
    if (i - from > MaxNumberChars) reject()
    pos = i
    numFrom = from
    numTo = i
    negative = neg
    integral = isInt
    mantissa = m
    significant = sig
    exp10 = exp - fraction
  }

  /** The byte at `i`, or 0 (no token's byte) past the end. */
  private def at(i: Int): Byte = if (i < end) b(i) else 0

  /** Whether the last number is an integer token (Jackson's VALUE_NUMBER_INT). */
  def isIntegral: Boolean = integral

  /** Whether the last number is an integer token within a long. */
  private def fitsLong: Boolean = integral && significant <= 19 &&
    java.lang.Long.compareUnsigned(mantissa, if (negative) Long.MinValue else Long.MaxValue) <= 0

  /** The last number as `getLongValue` reads an integer token; rejects any other. */
  def longValue: Long = {
    if (!fitsLong) reject()
    if (negative) -mantissa else mantissa
  }

  /** The last number as `getDoubleValue` reads it. */
  def doubleValue: Double =
    if (fitsLong) longValue.toDouble
    else if (!integral && significant <= 15 && exp10 >= -22 && exp10 <= 22) {
      val d = mantissa.toDouble
      val v = if (exp10 >= 0) d * DoublePowers(exp10) else d / DoublePowers(-exp10)
      if (negative) -v else v
    } else java.lang.Double.parseDouble(text)

  /** The last number as `getFloatValue` reads it. */
  def floatValue: Float =
    if (fitsLong) longValue.toFloat
    else if (!integral && significant <= 7 && exp10 >= -10 && exp10 <= 10) {
      val f = mantissa.toFloat
      val v = if (exp10 >= 0) f * FloatPowers(exp10) else f / FloatPowers(-exp10)
      if (negative) -v else v
    } else java.lang.Float.parseFloat(text)

  private def text: String = new String(b, numFrom, numTo - numFrom, ISO_8859_1)

  /** Reads any value, checking it, the cursor before it; `depth`: the containers it is in. */
  def skipValue(depth: Int): Unit = {
    peek() match {
      case '{' =>
        if (depth >= MaxDepth) reject()
        pos += 1
        if (peek() == '}') pos += 1
        else {
          var more = true
          while (more) {
            if (peek() != '"') reject()
            string(build = false) // a name: checked as a string, never compared
            expect(':')
            skipValue(depth + 1)
            more = separator('}')
          }
        }
      case '[' =>
        if (depth >= MaxDepth) reject()
        pos += 1
        if (peek() == ']') pos += 1
        else {
          var more = true
          while (more) {
            skipValue(depth + 1)
            more = separator(']')
          }
        }
      case '"' => string(build = false)
      case 't' => literal(True)
      case 'f' => literal(False)
      case 'n' => literal(Null)
      case c if c == '-' || (c >= '0' && c <= '9') => number()
      case _ => reject()
    }
  }

  /** After a member or element: true after a comma (another follows), false after `close`; rejects anything else. */
  def separator(close: Char): Boolean = {
    val c = peek()
    pos += 1
    if (c == ',') true else if (c == close) false else reject()
  }
}

private[json] object JsonScanner {

  /** The record is not strict JSON, or not one this scanner vouches for. Thrown by every check; carries nothing. */
  object Rejected extends RuntimeException with NoStackTrace

  def reject(): Nothing = throw Rejected

  /** Nesting depth (the top-level object is 1) and token lengths beyond which a record is rejected:
   *  far below the limits of Spark's Jackson parser, so that it is never Jackson's limit that decides. */
  final val MaxDepth = 256
  final val MaxNumberChars = 256
  final val MaxNameBytes = 1000

  /** Whether `name` (UTF-8) is a name [[JsonScanner.name]] reads as it is: no quote, backslash or byte
   *  below 0x20, and not too long. */
  def plainName(name: Array[Byte]): Boolean =
    name.length <= MaxNameBytes && name.forall(c => c != '"' && c != '\\' && (c & 0xe0) != 0)

  final val MaxStringBytes = 10000000

  val True: Array[Byte] = "true".getBytes(UTF_8)
  val False: Array[Byte] = "false".getBytes(UTF_8)
  val Null: Array[Byte] = "null".getBytes(UTF_8)

  /** The hash `nameHash` gives for a name of these bytes. */
  def hash(name: Array[Byte]): Int = name.foldLeft(0)((h, c) => 31 * h + c)

  // Powers of ten exact in the type: 5^22 < 2^53, 5^10 < 2^24.
  private val DoublePowers: Array[Double] = Array.tabulate(23)(i => s"1e$i".toDouble)
  private val FloatPowers: Array[Float] = Array.tabulate(11)(i => s"1e$i".toFloat)

  private def isDigit(c: Byte): Boolean = c >= '0' && c <= '9'

  private def hex(c: Byte): Int =
    if (c >= '0' && c <= '9') c - '0'
    else if (c >= 'a' && c <= 'f') c - 'a' + 10
    else if (c >= 'A' && c <= 'F') c - 'A' + 10
    else reject()

  /** Writes code point `cp` as UTF-8 at out[n]: the length after it. */
  private def utf8(cp: Int, out: Array[Byte], n: Int): Int =
    if (cp < 0x80) {
      out(n) = cp.toByte
      n + 1
    } else if (cp < 0x800) {
      out(n) = (0xc0 | (cp >> 6)).toByte
      out(n + 1) = (0x80 | (cp & 0x3f)).toByte
      n + 2
    } else if (cp < 0x10000) {
      out(n) = (0xe0 | (cp >> 12)).toByte
      out(n + 1) = (0x80 | ((cp >> 6) & 0x3f)).toByte
      out(n + 2) = (0x80 | (cp & 0x3f)).toByte
      n + 3
    } else {
      out(n) = (0xf0 | (cp >> 18)).toByte
      out(n + 1) = (0x80 | ((cp >> 12) & 0x3f)).toByte
      out(n + 2) = (0x80 | ((cp >> 6) & 0x3f)).toByte
      out(n + 3) = (0x80 | (cp & 0x3f)).toByte
      n + 4
    }
}
