package sluice.json

import java.nio.charset.StandardCharsets.UTF_8

import scala.util.Random

import org.apache.spark.sql.{DataFrame, Row, SparkSession}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.functions.{array, col, from_json, hex, inline, max, sum}
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

import sluice.json.internal.{DirectJsonToStructs, RecordDecoder}

/**
 * sluice's from_json decoding gives Spark's rows: random records, well-formed and not, through
 * `from_json` with `spark.sluice.json.decoder` at `spark` and at `sluice`, on one SparkSession.
 */
class JsonDecodeSuite extends AnyFunSuite with BeforeAndAfterAll {
  private var spark: SparkSession = _
  private val Key = "spark.sluice.json.decoder"

  override def beforeAll(): Unit = {
    spark = SparkSession.builder().master("local[2]").appName("JsonDecodeSuite")
      .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
      .config("spark.sql.extensions", "sluice.plugin.SluiceExtensions").getOrCreate()
  }

  override def afterAll(): Unit = if (spark != null) spark.stop()

  private val Inner = StructType(Seq(StructField("x", LongType), StructField("s", StringType)))
  private val Schema = StructType(Seq(
      StructField("l", LongType), StructField("i", IntegerType), StructField("sh", ShortType),
      StructField("b", ByteType), StructField("d", DoubleType), StructField("f", FloatType),
      StructField("t", BooleanType), StructField("s", StringType), StructField("n", Inner),
      StructField("né", LongType)))

  // --- random records: mostly what the decoder reads itself, the rest what only Spark's parser may decide

  /** Stands for an ill-formed UTF-8 sequence inside a string (the record's bytes get one of `illFormed`). */
  private val IllFormed = "ILLFORMED"
  private val illFormed =
    Seq(Seq(0xed, 0xa0, 0x80), Seq(0xc0, 0xaf), Seq(0xe0, 0x80, 0xaf), Seq(0xf4, 0x90, 0x80, 0x80),
      Seq(0xf8, 0x88, 0x80, 0x80, 0x80), Seq(0xe4, 0xb8), Seq(0x80)).map(_.map(_.toByte).toArray)

  /** String contents (JSON text between the quotes): strict JSON, then what is not or what Spark's encoder changes. */
  private val strings = Seq("", "plain", "a\\\"q", "tab\\t", "\\u00e9\\u4e2d", "é中😀", "\\ud83d\\ude00",
    "\\uD83D\\uDE00",
    "line\\nbreak", "x" * 40, "\\/\\\\\\b\\f\\r", "nul\\u0000", "\\u00E9", "a/b", "del\u007f",
    "\\u0041\\u07ff\\u0800\\uffff")
  private val badStrings = Seq("\\ud800 lone", "\\uDE00 low", "\\ud83d\\u0041", "end\\ud83d", "\\x", "\\'", "\\u12",
    "\\u00g0", "\\U00e9", "raw\ttab", "raw\u0001", "raw\nline", IllFormed)

  private def strContent(r: Random): String =
    if (r.nextInt(40) == 0) badStrings(r.nextInt(badStrings.size)) else strings(r.nextInt(strings.size))

  private def str(r: Random): String = "\"" + strContent(r) + "\""

  /** Number tokens: strict JSON (each Spark converts its own way per type: ranges, -0, rounding), then what is not. */
  private val numbers = Seq("0", "-0", "1", "-1", Long.MaxValue.toString, Long.MinValue.toString, "9223372036854775808",
    "-9223372036854775809", "1" + "0" * 30, "127", "128", "255", "256", "-128", "-129", "32767", "32768", "-32768",
    "-32769", "2147483647", "2147483648", "-2147483648", "-2147483649", "300", "40000", "3000000000", "16777217",
    "9007199254740993", "1.5", "-2.5E-3", "1e3", "1E+3", "1e-3", "0.0", "-0.0", "0e5", "-0e-5", "1.0", "0.1",
    "0.30000000000000004", "123456.789e-2", "1E400", "-1E400", "4.9e-324", "2e-324", "1e-400", "1.7976931348623157e308",
    "1.7976931348623159e308", "2.2250738585072011e-308", "3.4028235e38", "3.4028236e38", "1.4e-45", "7.0e-46",
    "1.00000017881393432617187499", "12345678901234567890.5", "0.000001234567", "1" * 25 + "e-5", "9" * 300,
    "1" + "0" * 1001, "1e0000000000000000001", "123456789012345e-7", "1234567e10", "1234567e-10", "9999999e-10")
  private val badNumbers = Seq("01", "-01", "00", "1.", ".5", "-", "+1", "1e", "1e+", "-.5", "0x10", "1_000", "NaN",
    "Infinity", "-Infinity", "1.5.3", "--1", "1ee3", "0.e1", "-a")

  /** A number token of any form, random or from `numbers`. */
  private def randomNumber(r: Random): String = r.nextInt(6) match {
    case 0 => numbers(r.nextInt(numbers.size))
    case 1 => java.lang.Double.toString(java.lang.Double.longBitsToDouble(r.nextLong())) match {
        case "NaN" | "Infinity" | "-Infinity" => "0.5"
        case d => d
      }
    case 2 => java.lang.Float.toString(r.nextFloat() * math.pow(10, r.nextInt(20) - 10).toFloat)
    case _ =>
      val int =
        if (r.nextInt(4) == 0) "0" else (1 + r.nextInt(9)).toString + Seq.fill(r.nextInt(20))(r.nextInt(10)).mkString
      val frac = if (r.nextBoolean()) "" else "." + Seq.fill(1 + r.nextInt(20))(r.nextInt(10)).mkString
      val exp = if (r.nextBoolean()) ""
      else Seq("e", "E")(r.nextInt(2)) + Seq("", "+", "-")(r.nextInt(3)) +
        (if (r.nextBoolean()) r.nextInt(25) else r.nextInt(400))
      (if (r.nextBoolean()) "-" else "") + int + frac + exp
  }

  private def number(r: Random): String =
    if (r.nextInt(40) == 0) badNumbers(r.nextInt(badNumbers.size)) else randomNumber(r)

  /** Any JSON value, nested up to `depth` (a field the schema lacks), rarely a malformed one. */
  private def anyValue(r: Random, depth: Int): String = r.nextInt(14) match {
    case 0 | 1 if depth > 0 => Seq.fill(r.nextInt(4))(anyValue(r, depth - 1)).mkString("[", ",", "]")
    case 2 | 3 if depth > 0 =>
      Seq.fill(r.nextInt(4))(s"${str(r)}:${anyValue(r, depth - 1)}").mkString("{", ",", "}")
    case 4 => number(r)
    case 5 => str(r)
    case 6 => Seq("true", "false", "null")(r.nextInt(3))
    case 7 if r.nextInt(10) == 0 =>
      Seq("[1,]", "[1 2]", "{\"a\" 1}", "{\"a\":}", "{,}", "[,1]", "{\"a\":1,}", "[",
        "{\"a\":[}", "[1]]", "{'a':1}", "[01]", "{\"a\\u0041\":[{}]}", "[tru]", "[nul]", "[True]", "{\"a\":1 \"b\":2}",
        "[\"\\x\"]", "{1:2}")(r.nextInt(19))
    case 8 if r.nextInt(8) == 0 => // deep: within the decoder's limit, beyond it (Spark's parser reads it), beyond Spark's
      val d = Seq(60, 300, 1100)(r.nextInt(3))
      "[" * d + "1" + "]" * d
    case _ => scalar(r)
  }

  private def scalar(r: Random): String = r.nextInt(10) match {
    case 0 => "null"
    case 1 => "true"
    case 2 => "false"
    case 3 | 4 => str(r)
    case 5 => s"""{"x":${number(r)},"s":${str(r)}}"""
    case 6 => "[1,2]"
    case 7 => "{}"
    case _ => number(r)
  }

  private def int(r: Random): String = (r.nextInt(201) - 100).toString

  /** A record's whitespace: none, JSON's, or (rarely) somewhere one JSON does not allow. */
  private final class Spacing(r: Random) {
    private val mode = r.nextInt(40) match {
      case 0 => 2
      case n if n < 12 => 1
      case _ => 0
    }
    private var bad = mode == 2
    def apply(): String = mode match {
      case 0 => ""
      case _ if bad && r.nextInt(4) == 0 =>
        bad = false
        Seq("\u000b", "\u00a0", "\f", "\u2028", "\u0000")(r.nextInt(5))
      case _ => Seq("", " ", "\t", "\n", "\r\n", "  ")(r.nextInt(6))
    }
  }

  /** Mostly a value of the field's type (or null), sometimes any value. */
  private def field(name: String, r: Random, sp: Spacing): String = {
    val v = if (r.nextInt(100) == 0) scalar(r)
    else Schema.fields.find(_.name == name).map(_.dataType) match {
      case _ if r.nextInt(12) == 0 => "null"
      case _ if r.nextInt(200) == 0 => Seq("nul", "nulll", "Null", "tru", "True", "falsey")(r.nextInt(6))
      case Some(LongType) => if (r.nextInt(25) == 0) number(r) else (r.nextLong() >> r.nextInt(64)).toString
      case Some(IntegerType | ShortType | ByteType) => if (r.nextInt(25) == 0) number(r) else int(r)
      case Some(DoubleType | FloatType) => if (r.nextBoolean()) number(r) else (r.nextGaussian() * 1e6).toString
      case Some(BooleanType) => r.nextBoolean().toString
      case Some(StringType) => str(r)
      case Some(_: StructType) =>
        val dup = if (r.nextBoolean()) s""",${sp()}"s"${sp()}:${sp()}null""" else ""
        s"""{${sp()}"x"${sp()}:${sp()}${int(r)}${sp()},${sp()}"s":${str(r)}$dup${sp()}}"""
      case _ => anyValue(r, 3) // a field the schema lacks
    }
    s""""$name"${sp()}:${sp()}$v"""
  }

  /** Field names: the schema's, ones it lacks (one differing in case only, one with an escape for "l"). */
  private val names = Schema.fieldNames.toSeq ++ Seq("extra", "other", "L", "nè", "\\u006c")

  private def record(r: Random): Array[Byte] = {
    val sp = new Spacing(r)
    // Half the records keep the schema's order, some fields left out (as most producers write them: the
    // decoder compares the next field's name first); the others take names at random, repeats included.
    val picked = if (r.nextBoolean()) names.filter(_ => r.nextInt(3) == 0)
    else Seq.fill(r.nextInt(names.size + 2))(names(r.nextInt(names.size)))
    val fields = picked.map(n => if (n == "\\u006c" && r.nextInt(4) > 0) "l" else n).map(field(_, r, sp))
    val obj = sp() + fields.map(f => sp() + f + sp()).mkString("{", ",", "}") + sp()
    val text = r.nextInt(60) match {
      case 0 => obj.dropRight(1) // truncated
      case 1 => obj + " trailing"
      case 2 => "[" + obj + "]"
      case 3 => "\ufeff" + obj
      case 4 => obj.replace("\"", "'") // single quotes: Spark's parser allows them
      case 5 => obj.replace(":1", ":NaN")
      case 6 => "  \n" + obj + "\t"
      case 7 => ""
      case 8 => "null"
      case 9 => obj.replace("0", "00")
      case 10 => s"""{"s":"ctl\u0001"}"""
      case 11 if fields.nonEmpty => obj.trim.dropRight(1) + ",}" // a trailing comma
      case 12 => obj + " " + obj // Spark reads the first value only
      case 13 => obj + "}"
      case 14 => "\u000b" + obj
      case 15 => " \t\r\n" + obj
      case _ => obj
    }
    val bytes = text.split(IllFormed, -1).map(_.getBytes(UTF_8))
      .reduce((a, b) => a ++ illFormed(r.nextInt(illFormed.size)) ++ b)
    r.nextInt(60) match {
      case 0 if bytes.length > 2 => bytes.updated(bytes.length / 2, 0xc0.toByte) // ill-formed UTF-8
      case 1 => bytes ++ Array(0xed, 0xa0, 0x80).map(_.toByte) // an encoded surrogate
      case 2 if bytes.length > 2 => bytes.updated(1, 0.toByte) // a NUL byte
      case 3 => Array(0xf0, 0x82, 0x82, 0xac).map(_.toByte) ++ bytes // an overlong form
      case _ => bytes
    }
  }

  private def records(seed: Long, n: Int): Seq[(Int, Array[Byte])] = {
    val r = new Random(seed)
    (0 until n).map(i => (i, record(r)))
  }

  private def parsed(decoder: String, input: Seq[(Int, Array[Byte])], schema: StructType): (Seq[Row], String) = {
    spark.conf.set(Key, decoder)
    try {
      val session = spark
      import session.implicits._
      val df: DataFrame = spark.sparkContext.parallelize(input, 2).toDF("id",
        "value") // not a local relation, which the optimizer would evaluate itself
        .select(col("id"), from_json(col("value").cast("string"), schema).alias("j"))
        // the strings' bytes too: a Row holds a Java String, which hides the difference of ill-formed UTF-8
        .select(col("id"), col("j"), hex(col("j.s")), hex(col("j.n.s")))
      (df.collect().sortBy(_.getInt(0)).toSeq, df.queryExecution.optimizedPlan.toString)
    } finally spark.conf.unset(Key)
  }

  /** Spark's rows of the records, asserted equal to sluice's. */
  private def sameRows(input: Seq[(Int, Array[Byte])]): Seq[Row] = {
    val (expected, sparkPlan) = parsed("spark", input, Schema)
    val (actual, sluicePlan) = parsed("sluice", input, Schema)
    assert(!sparkPlan.contains(DirectJsonToStructs.Name) && sluicePlan.contains(DirectJsonToStructs.Name), sluicePlan)
    assert(expected.size == input.size && actual.size == input.size)
    // compared as text: Row equality takes NaN for NaN but 0.0 for -0.0
    val differing = expected.zip(actual).filter { case (a, b) => a.toString != b.toString }
    assert(differing.isEmpty,
      s"${differing.size} of ${input.size} rows differ, first: ${differing.take(3).map {
          case (e, a) => s"record ${new String(input(e.getInt(0))._2, UTF_8)}: spark $e, sluice $a"
        }.mkString("; ")}")
    expected
  }

  /** How many of the records the decoder leaves to Spark's parser. */
  private def handedBack(input: Seq[(Int, Array[Byte])]): Int = {
    var n = 0
    val decoder = new RecordDecoder(Schema, Schema, _ => { n += 1; InternalRow.empty })
    input.foreach { case (_, b) => decoder.decode(UTF8String.fromBytes(b)) }
    n
  }

  test("random records, well-formed and not, give Spark's rows") {
    val input = records(seed = 7, n = 20000)
    val expected = sameRows(input)
    // both sides of the decoder were exercised: rows with values, and rows Spark made all-null
    assert(expected.count(r => r.getStruct(1) != null && r.getStruct(1).toSeq.exists(_ != null)) > input.size / 4)
    assert(expected.count(r => r.getStruct(1) != null && r.getStruct(1).toSeq.forall(_ == null)) > 100)
    // most records decoded by the decoder itself, a good share handed to Spark's parser
    val back = handedBack(input)
    assert(back > input.size / 10 && back < input.size / 2, s"$back of ${input.size} handed back")
  }

  test("numbers: each numeric type gets Spark's value") {
    val r = new Random(13)
    val literals = (numbers ++ badNumbers ++ Seq.fill(3000)(randomNumber(r))).distinct
    val numeric = Schema.fields.filter(f => f.dataType.isInstanceOf[NumericType]).map(_.name).toSeq
    val texts = for (x <- literals; f <- numeric) yield {
      val ws = if (r.nextInt(4) == 0) " " else ""
      s"""{"$f":$ws$x$ws}"""
    }
    val input = texts.zipWithIndex.map { case (t, i) => (i, t.getBytes(UTF_8)) }
    sameRows(input)
    // Every strict number (within the decoder's length limit) is read by the decoder itself into a double or float.
    val strict = for (x <- literals if !badNumbers.contains(x) && x.length <= 256; f <- Seq("d", "f"))
      yield (0, s"""{"$f":$x}""".getBytes(UTF_8))
    assert(handedBack(strict) == 0)
    // More numbers than Spark can compare in a test's time: a fraction or exponent into a double or float
    // is the JDK's parse of the text, which is what Jackson gives Spark for such a token.
    val decoder = new RecordDecoder(Schema, Schema, _ => null)
    for (_ <- 0 until 200000) {
      val x = randomNumber(r)
      if (x.exists(c => c == '.' || c == 'e' || c == 'E') && x.length < 200) {
        val row = decoder.decode(UTF8String.fromString(s"""{"d":$x,"f":$x}"""))
        assert(row != null, x)
        assert(java.lang.Double.compare(row.getDouble(4), java.lang.Double.parseDouble(x)) == 0, x)
        assert(java.lang.Float.compare(row.getFloat(5), java.lang.Float.parseFloat(x)) == 0, x)
      }
    }
  }

  test("the decoder reads well-formed records itself and leaves the rest to Spark's parser") {
    var handedBack = Seq.empty[String]
    val decoder = new RecordDecoder(Schema, Schema, r => { handedBack :+= r.toString; InternalRow.empty })
    def decode(s: String): InternalRow = decoder.decode(UTF8String.fromString(s))
    val row = decode("""{"other":{"a":[1,{"b":2}]},"l":5,"s":"é😀","n":{"x":-1,"s":null},"t":true,"l":6}""")
    assert(handedBack.isEmpty)
    assert(row.getLong(0) == 6 && row.isNullAt(1) && row.getUTF8String(7).toString == "é😀" && row.getBoolean(6))
    assert(row.getStruct(8, 2).getLong(0) == -1 && row.getStruct(8, 2).isNullAt(1))
    val spaced =
      decode(" \t{ \"b\" :\r\n255 , \"sh\":-32768,\"d\":-0,\"f\":16777217,\"s\":\"\\ud83d\\ude00\\/\\u00e9\\\"\" }] x")
    assert(handedBack.isEmpty)
    assert(spaced.getByte(3) == -1 && spaced.getShort(2) == Short.MinValue && spaced.getFloat(5) == 16777216f)
    assert(java.lang.Double.compare(spaced.getDouble(4), 0.0) == 0 && spaced.getUTF8String(7).toString == "😀/é\"")
    assert(java.lang.Double.compare(decode("""{"d":-0.0}""").getDouble(4), -0.0) == 0)
    assert(decode("""{"d":1E400}""").getDouble(4) == Double.PositiveInfinity && decode("""{"d":4.9e-324}""").getDouble(
      4) > 0)
    val notMine = Seq("""{"l":"5"}""", """{"s":5}""", """{"l":1.5}""", """{"i":3000000000}""", """{'l':1}""",
      """{"d":NaN}""", """{"n":[]}""", """[{"l":1}]""", "", "null", """{"l":1""", "\ufeff{}", """{"l":01}""",
      """{"l":1,}""", """{"l":-}""", """{"d":1.}""", """{"d":.5}""", """{"l":+1}""", "{\"s\":\"a\u0001\"}",
      "{\"\\u006c\":1}", """{"l":1e2}""", """{"b":256}""", """{"sh":32768}""", "{\"s\":\"\\ud800\"}", "{\"s\":\"\\'\"}",
      """{"other":[1,]}""", "{\"other\":" + "[" * 300 + "]" * 300 + "}", "{\"d\":" + "1" * 300 + "}", "\u000b{}",
      """{"t":tru}""", """{"l":1 "i":2}""", """{"l" 1}""")
    notMine.foreach(decode)
    assert(handedBack == notMine)
  }

  /** The rows of `read` over the records, decoded by `decoder`, and what the plan's decoder builds. */
  private def narrowed(decoder: String, input: Seq[(Int, Array[Byte])],
      read: DataFrame => DataFrame): (Seq[Row], Option[String]) = {
    spark.conf.set(Key, decoder)
    try {
      val session = spark
      import session.implicits._
      val df = read(spark.sparkContext.parallelize(input, 2).toDF("id", "value"))
      val built = df.queryExecution.optimizedPlan.flatMap(_.expressions).flatMap(_.collect {
        case d: DirectJsonToStructs => d.decoded.simpleString
      }).headOption
      (df.collect().sortBy(_.getInt(0)).toSeq, built)
    } finally spark.conf.unset(Key)
  }

  test("a query reading some fields is decoded with only those built, and gets Spark's values for them") {
    val input = records(seed = 11, n = 4000)
    val json = from_json(col("value").cast("string"), Schema)
    // The fields named as columns by inline(array(...)); and a projection's alias (j) whose fields an
    // aggregation reads, through the aliases Spark's optimizer puts below it (j.n.x AS _extract_x).
    val queries: Seq[(String, DataFrame => DataFrame, String)] = Seq(
      ("inline",
        df =>
          df.select(col("id"), inline(array(json))).where(col("t").isNotNull || col("n.x") > 0)
            .select(col("id"), col("l"), col("n.x")),
        "struct<l:bigint,t:boolean,n:struct<x:bigint>>"),
      ("alias",
        df =>
          df.select(col("id"), json.alias("j")).groupBy("id")
            .agg(max(col("j.d")), max(col("j.n.s")), sum(col("j.n.x"))),
        "struct<d:double,n:struct<x:bigint,s:string>>"))
    for ((name, read, built) <- queries) {
      val (expected, sparkBuilt) = narrowed("spark", input, read)
      val (actual, sluiceBuilt) = narrowed("sluice", input, read)
      assert(sparkBuilt.isEmpty && sluiceBuilt.contains(built), s"$name: $sluiceBuilt")
      val sizes = (expected.size, actual.size)
      assert(sizes._1 == sizes._2 && sizes._1 > input.size / 5, s"$name: rows $sizes of ${input.size}")
      val differing = expected.zip(actual).filter { case (a, b) => a != b }
      assert(differing.isEmpty,
        s"$name: ${differing.size} rows differ, first: " +
          differing.take(3).map { case (e, a) =>
            s"record ${new String(input(e.getInt(0))._2, UTF_8)}: spark $e, sluice $a"
          }
            .mkString("; "))
      // records with a value, and records whose values Spark's rules for bad records decided
      val withValues = expected.count(r => (1 until r.length).exists(!r.isNullAt(_)))
      assert(withValues > expected.size / 4, s"$name: $withValues of ${expected.size} rows with values")
    }
  }

  test("a field not built is still checked: a record goes to Spark's parser as with the whole schema") {
    var handedBack = Seq.empty[String]
    val read = StructType(Seq(StructField("l", LongType)))
    val decoder = new RecordDecoder(Schema, read, r => { handedBack :+= r.toString; InternalRow.empty })
    def decode(s: String): InternalRow = decoder.decode(UTF8String.fromString(s))
    val row = decode("""{"l":5,"s":"not built","n":{"x":1,"s":"é"},"i":7}""")
    assert(handedBack.isEmpty && row.getLong(0) == 5 && row.isNullAt(7) && row.isNullAt(8) && row.isNullAt(1))
    val notMine = Seq("""{"l":1,"s":5}""", """{"l":1,"i":3000000000}""", """{"l":1,"n":{"x":"1"}}""",
      """{"l":1,"n":[]}""", """{"l":1,"t":1}""", """{"l":1,"s":"a\q"}""")
    notMine.foreach(decode)
    assert(handedBack == notMine)
  }

  test("from_json with options, other types, a corrupt-record column or duplicate names stays Spark's") {
    val session = spark
    import session.implicits._
    val df = spark.sparkContext.parallelize(Seq("""{"a":1}""")).toDF("value")
    def plan(c: org.apache.spark.sql.Column): String = {
      spark.conf.set(Key, "sluice")
      try df.select(c).queryExecution.optimizedPlan.toString
      finally spark.conf.unset(Key)
    }
    val simple = StructType(Seq(StructField("a", LongType)))
    assert(plan(from_json(col("value"), simple)).contains(DirectJsonToStructs.Name))
    Seq(
      from_json(col("value"), simple, Map("allowComments" -> "true")),
      from_json(col("value"), simple.add("ts", TimestampType)),
      from_json(col("value"), simple.add("arr", ArrayType(LongType))),
      from_json(col("value"), simple.add("dec", DecimalType(10, 2))),
      from_json(col("value"), simple.add("_corrupt_record", StringType)),
      from_json(col("value"), StructType(Seq(StructField("a", LongType), StructField("a", StringType)))),
      from_json(col("value"), ArrayType(simple))
    ).foreach(c => assert(!plan(c).contains(DirectJsonToStructs.Name), plan(c)))
  }
}
