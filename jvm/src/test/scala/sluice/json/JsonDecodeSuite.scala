package sluice.json

import java.nio.charset.StandardCharsets.UTF_8

import scala.util.Random

import org.apache.spark.sql.{DataFrame, Row, SparkSession}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.functions.{array, col, from_json, inline, max, sum}
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
    StructField("t", BooleanType), StructField("s", StringType), StructField("n", Inner)))

  // --- random records: mostly what the decoder reads itself, the rest what only Spark's parser may decide

  /** Stands for an ill-formed UTF-8 sequence inside a string (the record's bytes get one of `illFormed`). */
  private val IllFormed = "ILLFORMED"
  private val illFormed = Seq(Seq(0xED, 0xA0, 0x80), Seq(0xC0, 0xAF), Seq(0xE0, 0x80, 0xAF), Seq(0xF4, 0x90, 0x80, 0x80),
    Seq(0xF8, 0x88, 0x80, 0x80, 0x80), Seq(0xE4, 0xB8), Seq(0x80)).map(_.map(_.toByte).toArray)

  private val strings = Seq("", "plain", "a\"q", "tab\\t", "\\u00e9\\u4e2d", "é中😀", "\\ud83d\\ude00", "\\ud800 lone",
    "line\\nbreak", "x" * 40, IllFormed)


  private def number(r: Random): String = r.nextInt(12) match {
    case 0 => "0"
    case 1 => "-0"
    case 2 => Long.MaxValue.toString
    case 3 => "9223372036854775808" // beyond a long
    case 4 => "1.5"
    case 5 => "1e3"
    case 6 => "-2.5E-3"
    case 7 => "300" // beyond a byte
    case 8 => "40000" // beyond a short
    case 9 => "3000000000" // beyond an int
    case 10 => "1" + "0" * 30 // beyond every integer type
    case _ => (r.nextInt(2001) - 1000).toString
  }

  private def scalar(r: Random): String = r.nextInt(10) match {
    case 0 => "null"
    case 1 => "true"
    case 2 => "false"
    case 3 | 4 => "\"" + strings(r.nextInt(strings.size)) + "\""
    case 5 => s"""{"x":${number(r)},"s":"${strings(r.nextInt(strings.size))}"}"""
    case 6 => "[1,2]"
    case 7 => "{}"
    case _ => number(r)
  }

  private def str(r: Random): String = "\"" + strings(r.nextInt(strings.size)) + "\""

  private def int(r: Random): String = (r.nextInt(201) - 100).toString

  /** Mostly a value of the field's type (or null), sometimes any value. */
  private def field(name: String, r: Random): String = {
    val v = if (r.nextInt(50) == 0) scalar(r) else Schema.fields.find(_.name == name).map(_.dataType) match {
      case _ if r.nextInt(12) == 0 => "null"
      case Some(LongType) => if (r.nextInt(10) == 0) number(r) else (r.nextLong() >> r.nextInt(64)).toString
      case Some(IntegerType | ShortType | ByteType) => int(r)
      case Some(DoubleType | FloatType) => if (r.nextBoolean()) number(r) else (r.nextGaussian() * 1e6).toString
      case Some(BooleanType) => r.nextBoolean().toString
      case Some(StringType) => str(r)
      case Some(_: StructType) => s"""{"x":${int(r)},"s":${str(r)}${if (r.nextBoolean()) ""","s":null""" else ""}}"""
      case _ => scalar(r) // a field the schema lacks
    }
    s""""$name":$v"""
  }

  private def record(r: Random): Array[Byte] = {
    val names = Schema.fieldNames.toSeq ++ Seq("extra", "other")
    val fields = Seq.fill(r.nextInt(names.size + 2))(names(r.nextInt(names.size))).map(field(_, r))
    val obj = fields.mkString("{", if (r.nextBoolean()) "," else " , ", "}")
    val text = r.nextInt(40) match {
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
      case _ => obj
    }
    val bytes = text.split(IllFormed, -1).map(_.getBytes(UTF_8))
      .reduce((a, b) => a ++ illFormed(r.nextInt(illFormed.size)) ++ b)
    r.nextInt(30) match {
      case 0 if bytes.length > 2 => bytes.updated(bytes.length / 2, 0xC0.toByte) // ill-formed UTF-8
      case 1 => bytes ++ Array(0xED, 0xA0, 0x80).map(_.toByte) // an encoded surrogate
      case 2 if bytes.length > 2 => bytes.updated(1, 0.toByte) // a NUL byte
      case 3 => Array(0xF0, 0x82, 0x82, 0xAC).map(_.toByte) ++ bytes // an overlong form
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
      val df: DataFrame = spark.sparkContext.parallelize(input, 2).toDF("id", "value") // not a local relation, which the optimizer would evaluate itself
        .select(col("id"), from_json(col("value").cast("string"), schema).alias("j"))
      (df.collect().sortBy(_.getInt(0)).toSeq, df.queryExecution.optimizedPlan.toString)
    } finally spark.conf.unset(Key)
  }

  test("random records, well-formed and not, give Spark's rows") {
    val input = records(seed = 7, n = 4000)
    val (expected, sparkPlan) = parsed("spark", input, Schema)
    val (actual, sluicePlan) = parsed("sluice", input, Schema)
    assert(!sparkPlan.contains(DirectJsonToStructs.Name) && sluicePlan.contains(DirectJsonToStructs.Name), sluicePlan)
    val differing = expected.zip(actual).filter { case (a, b) => a != b }
    assert(expected.size == input.size && actual.size == input.size)
    assert(differing.isEmpty, s"${differing.size} of ${input.size} rows differ, first: ${differing.take(3).map {
      case (e, a) => s"record ${new String(input(e.getInt(0))._2, UTF_8)}: spark $e, sluice $a" }.mkString("; ")}")
    // both sides of the decoder were exercised: rows with values, and rows Spark made all-null
    assert(expected.count(r => r.getStruct(1) != null && r.getStruct(1).toSeq.exists(_ != null)) > input.size / 4)
    assert(expected.count(r => r.getStruct(1) != null && r.getStruct(1).toSeq.forall(_ == null)) > 20)
    // most records decoded by the decoder itself, a good share handed to Spark's parser
    var handedBack = 0
    val decoder = new RecordDecoder(Schema, Schema, _ => { handedBack += 1; InternalRow.empty })
    input.foreach { case (_, b) => decoder.decode(UTF8String.fromBytes(b)) }
    assert(handedBack > input.size / 10 && handedBack < input.size / 2, s"$handedBack of ${input.size} handed back")
  }

  test("the decoder reads well-formed records itself and leaves the rest to Spark's parser") {
    var handedBack = Seq.empty[String]
    val decoder = new RecordDecoder(Schema, Schema, r => { handedBack :+= r.toString; InternalRow.empty })
    def decode(s: String): InternalRow = decoder.decode(UTF8String.fromString(s))
    val row = decode("""{"other":{"a":[1,{"b":2}]},"l":5,"s":"é😀","n":{"x":-1,"s":null},"t":true,"l":6}""")
    assert(handedBack.isEmpty)
    assert(row.getLong(0) == 6 && row.isNullAt(1) && row.getUTF8String(7).toString == "é😀" && row.getBoolean(6))
    assert(row.getStruct(8, 2).getLong(0) == -1 && row.getStruct(8, 2).isNullAt(1))
    val notMine = Seq("""{"l":"5"}""", """{"s":5}""", """{"l":1.5}""", """{"i":3000000000}""", """{'l':1}""",
      """{"d":NaN}""", """{"n":[]}""", """[{"l":1}]""", "", "null", """{"l":1""", "\ufeff{}", """{"l":01}""")
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
      ("inline", df => df.select(col("id"), inline(array(json))).where(col("t").isNotNull || col("n.x") > 0)
        .select(col("id"), col("l"), col("n.x")),
        "struct<l:bigint,t:boolean,n:struct<x:bigint>>"),
      ("alias", df => df.select(col("id"), json.alias("j")).groupBy("id")
        .agg(max(col("j.d")), max(col("j.n.s")), sum(col("j.n.x"))),
        "struct<d:double,n:struct<x:bigint,s:string>>"))
    for ((name, read, built) <- queries) {
      val (expected, sparkBuilt) = narrowed("spark", input, read)
      val (actual, sluiceBuilt) = narrowed("sluice", input, read)
      assert(sparkBuilt.isEmpty && sluiceBuilt.contains(built), s"$name: $sluiceBuilt")
      val sizes = (expected.size, actual.size)
      assert(sizes._1 == sizes._2 && sizes._1 > input.size / 5, s"$name: rows $sizes of ${input.size}")
      val differing = expected.zip(actual).filter { case (a, b) => a != b }
      assert(differing.isEmpty, s"$name: ${differing.size} rows differ, first: " +
        differing.take(3).map { case (e, a) => s"record ${new String(input(e.getInt(0))._2, UTF_8)}: spark $e, sluice $a" }
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
      try df.select(c).queryExecution.optimizedPlan.toString finally spark.conf.unset(Key)
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
