package sluice.connect

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
// Spark Connect's jar carries its own (shaded) protobuf; the extension message is read with it.
import org.sparkproject.connect.protobuf.{CodedInputStream, InvalidProtocolBufferException, WireFormat}

import sluice.conf.SluiceConf
import sluice.spark.ConnectRelationPlugin
import sluice.suppress._
import sluice.suppress.internal.SuppressPlanner

/**
 * Spark Connect relation plugin for `suppress`: a Connect client (python/sluice/_connect.py)
 * sends a `Relation` whose `extension` (a `google.protobuf.Any`) has type URL
 * [[SuppressRelation.TypeUrl]]; this plugin turns it into the same plan the DataFrame API builds.
 * Registered on the server with `spark.connect.extensions.relation.classes=sluice.connect.SuppressRelationPlugin`.
 */
class SuppressRelationPlugin extends ConnectRelationPlugin(SuppressRelation.TypeUrl) {
  override protected def plan(message: Array[Byte], session: SparkSession,
      resolve: Array[Byte] => LogicalPlan): LogicalPlan = {
    val msg = SuppressRelation.decode(message)
    SuppressPlanner.ofPlan(session, resolve(msg.input), msg.suppressed, msg.timeCol)
  }
}

/**
 * The extension message. Its schema, as protobuf would declare it:
 * {{{
 * // type URL: type.googleapis.com/sluice.connect.Suppress
 * message Suppress {
 *   bytes input = 1;        // a serialized spark.connect.Relation: the aggregation to suppress
 *   string kind = 2;        // until_window_closes | until_time_limit | until_wall_clock_time_limit
 *   int64 limit_ms = 3;     // the time limit of the two time-limit kinds
 *   int64 max_records = 4;  // buffer bound per partition; absent = no bound
 *   int64 max_bytes = 5;    // buffer bound per partition; absent = no bound
 *   string when_full = 6;   // emit_early | shut_down | spill_to_disk
 *   string name = 7;        // optional operator name (Suppressed.withName)
 *   string time_col = 8;    // optional, until_time_limit's event-time column
 *   int64 grace_ms = 9;     // optional, until_window_closes' grace period; absent = the watermark delay
 *   string late_path = 10;  // optional, where until_window_closes keeps its late records (LateRecords)
 *   string late_format = 11;              // their Spark file format; absent = parquet
 *   map<string, string> late_options = 12; // their write options
 * }
 * }}}
 * It is a real protobuf message, so that the client can write it with any protobuf library and
 * fields can be added later (unknown fields are skipped), yet it is encoded and decoded by hand
 * (a handful of tags) so neither side needs generated code or protoc in the build.
 */
object SuppressRelation {
  val TypeUrl: String = SluiceConf.ConnectTypeUrl

  final case class Message(input: Array[Byte], suppressed: Suppressed, timeCol: Option[String])

  private def invalid(msg: String): Nothing =
    throw new IllegalArgumentException(s"Invalid sluice suppress relation from the Spark Connect client: $msg")

  def decode(bytes: Array[Byte]): Message =
    try decodeFields(bytes)
    catch {
      // A truncated or garbled message: the request fails with what protobuf found, the server goes on.
      case e: InvalidProtocolBufferException => invalid(s"not a readable protobuf message (${e.getMessage})")
    }

  private def decodeFields(bytes: Array[Byte]): Message = {
    val in = CodedInputStream.newInstance(bytes)
    var input: Array[Byte] = null
    var kind = ""
    var limitMs = 0L
    var maxRecords = Long.MaxValue
    var maxBytes = Long.MaxValue
    var whenFull = "shut_down"
    var name: Option[String] = None
    var timeCol: Option[String] = None
    var graceMs: Option[Long] = None
    var latePath: Option[String] = None
    var lateFormat: Option[String] = None
    var lateOptions = Map.empty[String, String]
    var tag = in.readTag()
    while (tag != 0) {
      WireFormat.getTagFieldNumber(tag) match {
        case 1 => input = in.readByteArray()
        case 2 => kind = in.readStringRequireUtf8()
        case 3 => limitMs = in.readInt64()
        case 4 => maxRecords = in.readInt64()
        case 5 => maxBytes = in.readInt64()
        case 6 => whenFull = in.readStringRequireUtf8()
        case 7 => name = Some(in.readStringRequireUtf8())
        case 8 => timeCol = Some(in.readStringRequireUtf8())
        case 9 => graceMs = Some(in.readInt64())
        case 10 => latePath = Some(in.readStringRequireUtf8())
        case 11 => lateFormat = Some(in.readStringRequireUtf8())
        case 12 => lateOptions += mapEntry(in.readByteArray())
        case _ => in.skipField(tag)
      }
      tag = in.readTag()
    }
    if (input == null) invalid("no input relation")
    if (graceMs.nonEmpty && kind != "until_window_closes")
      invalid(s"grace_ms is only for until_window_closes, not $kind")
    if ((lateFormat.nonEmpty || lateOptions.nonEmpty) && latePath.isEmpty)
      invalid("late_format or late_options without late_path")
    if (latePath.nonEmpty && kind != "until_window_closes")
      invalid(s"late_path is only for until_window_closes, not $kind")
    val late = latePath.map(p => LateRecords(p, lateFormat.getOrElse("parquet"), lateOptions))
    Message(input, suppressed(kind, limitMs, bufferConfig(maxRecords, maxBytes, whenFull), name, graceMs, late),
      timeCol)
  }

  /** A `map<string, string>` entry: key = 1, value = 2. */
  private def mapEntry(bytes: Array[Byte]): (String, String) = {
    val in = CodedInputStream.newInstance(bytes)
    var key = ""
    var value = ""
    var tag = in.readTag()
    while (tag != 0) {
      WireFormat.getTagFieldNumber(tag) match {
        case 1 => key = in.readStringRequireUtf8()
        case 2 => value = in.readStringRequireUtf8()
        case _ => in.skipField(tag)
      }
      tag = in.readTag()
    }
    key -> value
  }

  private def bufferConfig(maxRecords: Long, maxBytes: Long, whenFull: String): BufferConfig = {
    val bounded = BufferConfig.unbounded().withMaxRecords(maxRecords).withMaxBytes(maxBytes)
    whenFull match {
      case "emit_early" => bounded.emitEarlyWhenFull()
      case "shut_down" => bounded.shutDownWhenFull()
      case "spill_to_disk" => bounded.spillToDiskWhenFull()
      case other => invalid(s"unknown when_full '$other'")
    }
  }

  private def suppressed(kind: String, limitMs: Long, buffer: BufferConfig, name: Option[String],
      graceMs: Option[Long], late: Option[LateRecords]): Suppressed = {
    val s: Suppressed = kind match {
      case "until_window_closes" => buffer match {
          case strict: StrictBufferConfig => UntilWindowCloses(strict, graceMs = graceMs, lateRecords = late)
          case _ => throw new SuppressUsageException(
              s"until_window_closes needs a strict buffer config, got $buffer: emitting early would break the " +
                "one-final-result guarantee")
        }
      case "until_time_limit" => Suppressed.untilTimeLimit(limitMs, buffer)
      case "until_wall_clock_time_limit" => Suppressed.untilWallClockTimeLimit(limitMs, buffer)
      case other => invalid(s"unknown suppress kind '$other'")
    }
    name.fold(s)(n => s.withName(n))
  }
}
