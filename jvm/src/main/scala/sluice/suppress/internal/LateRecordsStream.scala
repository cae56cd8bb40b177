package sluice.suppress.internal

import java.nio.charset.StandardCharsets

import scala.util.Try

import com.fasterxml.jackson.databind.ObjectMapper
import com.fasterxml.jackson.databind.node.ObjectNode
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileSystem, Path}

import org.apache.spark.sql.{DataFrame, SQLContext, SparkSession}
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.connector.read.streaming.{Offset => OffsetV2, ReadLimit, SupportsTriggerAvailableNow}
import org.apache.spark.sql.sluice.{BatchFiles, DatasetAccess}
import org.apache.spark.sql.sources.{DataSourceRegister, StreamSourceProvider}
import org.apache.spark.sql.types.{ArrayType, DataType, LongType, MapType, StructField, StructType}

import sluice.conf.SluiceConf
import sluice.spark.CheckpointTypes.CheckpointFileManager
import sluice.spark.SourceTypes.{LogicalRelation, LongOffset, Offset, Source}
import sluice.spark.SparkNodes
import sluice.suppress.{LateRecords, SuppressUsageException}

/**
 * The columns of the records kept at a late-records path, in the file suppress writes beside them
 * ([[SluiceConf.LateRecordsSchemaFile]], hidden from Spark's file readers by its leading underscore)
 * when a query run prepares its writer: before the run's first batch writes, so a reader of the
 * path knows the columns before any record is written, and knows which query writes there (its
 * checkpoint) and in which file format. `version` is the file's format version: a reader refuses
 * one newer than it knows rather than guess at its fields.
 */
private[sluice] final case class LateRecordsSchema(version: Int, format: String, checkpoint: String,
    schema: StructType)

private[sluice] object LateRecordsSchema {

  /** The format version this sluice writes, and the newest it reads. */
  val Version = 1

  private val mapper = new ObjectMapper()

  def file(base: Path): Path = new Path(base, SluiceConf.LateRecordsSchemaFile)

  /**
   * Writes the file of the records `late` keeps with columns `schema` for the query of checkpoint
   * `checkpoint`, unless the same is there: through Spark's checkpoint file manager, which writes
   * under a hidden name and renames over the earlier file (atomically where the file system can), so
   * a reader sees the earlier file or this one whole, as Spark's own checkpoint files.
   */
  def write(conf: Configuration, late: LateRecords, schema: StructType, checkpoint: Path): Unit = {
    val base = new Path(late.path)
    val fs = base.getFileSystem(conf)
    val stored = LateRecordsSchema(Version, late.format, qualified(checkpoint.getFileSystem(conf), checkpoint), schema)
    val target = file(base)
    if (read(fs, base).contains(stored)) return
    val node = mapper.createObjectNode()
    node.put("version", stored.version)
    node.put("format", stored.format)
    node.put("checkpoint", stored.checkpoint)
    node.set[ObjectNode]("schema", mapper.readTree(schema.json))
    val fm = CheckpointFileManager.create(base, conf)
    fm.mkdirs(base)
    val out = fm.createAtomic(target, overwriteIfPossible = true)
    try out.write(mapper.writerWithDefaultPrettyPrinter().writeValueAsBytes(node))
    catch {
      case e: Throwable =>
        out.cancel()
        throw e
    }
    out.close()
  }

  /** The file at `base`, if there is one; fails on a file this sluice cannot read. */
  def read(fs: FileSystem, base: Path): Option[LateRecordsSchema] = {
    val f = file(base)
    if (!fs.exists(f)) None
    else {
      val in = fs.open(f)
      val text =
        try new String(in.readAllBytes(), StandardCharsets.UTF_8)
        finally in.close()
      def bad(why: String): Nothing = throw new SuppressUsageException(s"cannot read the late records' schema " +
        s"file $f: $why.")
      val node = Try(mapper.readTree(text)).getOrElse(bad("it is not JSON"))
      val version = Option(node.get("version")).filter(_.canConvertToInt).map(_.asInt).getOrElse(bad(
          "it has no format version"))
      if (version > Version) bad(s"it has format version $version, written by a newer sluice; this sluice reads " +
        s"format versions up to $Version")
      def field(name: String) = Option(node.get(name)).filter(_.isTextual).map(_.asText).getOrElse(bad(
          s"it has no '$name'"))
      val schema = Option(node.get("schema")).flatMap(s => Try(DataType.fromJson(s.toString)).toOption).collect {
        case s: StructType => s
      }.getOrElse(bad("it has no schema"))
      Some(LateRecordsSchema(version, field("format"), field("checkpoint"), schema))
    }
  }

  def qualified(fs: FileSystem, p: Path): String = fs.makeQualified(p).toString
}

/**
 * What a late-records stream reads, checked: the records' path and the main query's checkpoint
 * (qualified), their file format, the reader's options and the stream's columns (the records'
 * columns and `batch_id`, the main query's batch that kept each).
 */
private[sluice] final case class LateRecordsRead(path: Path, checkpoint: Path, format: String,
    options: Map[String, String], schema: StructType, conf: Configuration) {

  /** The main query's last committed batch, if any: a batch at or below it is not rewritten. */
  def lastCommitted(): Option[Long] = {
    val commits = new Path(checkpoint, LateRecordsRead.CommitsDir)
    val fs = commits.getFileSystem(conf)
    if (!fs.exists(commits)) None
    else fs.listStatus(commits).map(_.getPath.getName).filter(_.matches("[0-9]+")).map(_.toLong).maxOption
  }

  /** The directories of the main query's batches in (after, upTo] that exist. */
  def batchDirs(after: Long, upTo: Long): Seq[Path] = {
    val fs = path.getFileSystem(conf)
    val Dir = s"${LateRecords.BatchColumn}=([0-9]+)".r
    if (!fs.exists(path)) Nil
    else fs.listStatus(path).toSeq.filter(_.isDirectory).map(_.getPath).flatMap { p =>
      p.getName match {
        case Dir(id) if id.toLong > after && id.toLong <= upTo => Some(id.toLong -> p)
        case _ => None
      }
    }.sortBy(_._1).map(_._2)
  }
}

private[sluice] object LateRecordsRead {

  /** The folder of a streaming checkpoint holding one file per committed batch, named by its id. */
  val CommitsDir = "commits"

  /** What a streaming checkpoint has from its query's start: the query id, the offset log. */
  private val CheckpointMarks = Seq("metadata", "offsets")

  private def refuse(msg: String): Nothing = throw new SuppressUsageException(msg)

  /** The read `parameters` (the source's options) and `userSchema` ask for, or why it cannot be. */
  def of(session: SparkSession, parameters: Map[String, String], userSchema: Option[StructType]): LateRecordsRead = {
    val params = parameters.map { case (k, v) => k.toLowerCase(java.util.Locale.ROOT) -> v }
    def param(key: String, what: String): String = params.get(key.toLowerCase(java.util.Locale.ROOT)).filter(
      _.trim.nonEmpty).getOrElse(refuse(s"the late records stream needs $what"))
    val path = param("path", "the path the records are kept at")
    val checkpoint = param(SluiceConf.LateRecordsCheckpointOption,
      "the checkpoint location of the query that keeps them (the main query's)")
    val format = param(SluiceConf.LateRecordsFormatOption, "their file format")
    val reserved = Set("path", SluiceConf.LateRecordsCheckpointOption, SluiceConf.LateRecordsFormatOption).map(
      _.toLowerCase(java.util.Locale.ROOT))
    val options = parameters.filter { case (k, _) => !reserved(k.toLowerCase(java.util.Locale.ROOT)) }
    val fileFormat = BatchFiles.fileFormat(session, format).fold(e => refuse(s"late records: $e"), identity)
    val conf = BatchFiles.hadoopConf(session, options)

    val ckpt = new Path(checkpoint)
    val ckptFs = ckpt.getFileSystem(conf)
    val found =
      if (ckptFs.exists(ckpt)) Try(ckptFs.listStatus(ckpt).map(_.getPath.getName).sorted.toSeq).getOrElse(Nil)
      else Nil
    if (!CheckpointMarks.forall(found.contains)) {
      val what = if (!ckptFs.exists(ckpt)) "no such directory"
      else if (found.isEmpty) "an empty directory" else found.mkString("[", ", ", "]")
      refuse(s"'$checkpoint' is not a streaming query's checkpoint location: expected its " +
        s"${CheckpointMarks.mkString(" and ")}, found $what (give the checkpoint location of the query that keeps " +
        "the late records, after it has started)")
    }
    val ckptQualified = LateRecordsSchema.qualified(ckptFs, ckpt)

    val base = new Path(path)
    val fs = base.getFileSystem(conf)
    val records = LateRecordsSchema.read(fs, base) match {
      case Some(stored) =>
        val storedFormat = BatchFiles.fileFormat(session, stored.format).toOption
        if (!storedFormat.exists(_.getClass == fileFormat.getClass)) refuse(s"the late records at $path are " +
          s"written as '${stored.format}', not '$format'")
        if (stored.checkpoint != ckptQualified) refuse(s"the late records at $path are kept by the query of " +
          s"checkpoint ${stored.checkpoint}, not of $ckptQualified")
        userSchema.map(withoutBatch).filter(s => !sameColumns(s, stored.schema)).foreach { s =>
          refuse(s"the schema given for the late records at $path, ${s.simpleString}, is not theirs: " +
            stored.schema.simpleString)
        }
        stored.schema
      case None => userSchema.map(withoutBatch).getOrElse(refuse(s"no late records' schema at $path (its " +
            s"${SluiceConf.LateRecordsSchemaFile}): the query that keeps them writes it before its first batch " +
            "writes; start that query and let it run a batch, or give the records' schema"))
    }
    val schema = nullable(StructType(records.fields :+ StructField(LateRecords.BatchColumn, LongType))).asInstanceOf[
      StructType]
    LateRecordsRead(fs.makeQualified(base), ckptFs.makeQualified(ckpt), format, options, schema, conf)
  }

  private def withoutBatch(s: StructType): StructType =
    StructType(s.fields.filterNot(_.name == LateRecords.BatchColumn))

  /** Whether `a` and `b` have the same columns, nullable or not, whatever their metadata. */
  private def sameColumns(a: StructType, b: StructType): Boolean = bare(nullable(a)) == bare(nullable(b))

  private def bare(t: DataType): DataType = t match {
    case s: StructType => StructType(s.fields.map(f =>
          f.copy(dataType = bare(f.dataType),
            metadata = org.apache.spark.sql.types.Metadata.empty)))
    case a: ArrayType => a.copy(elementType = bare(a.elementType))
    case m: MapType => m.copy(keyType = bare(m.keyType), valueType = bare(m.valueType))
    case other => other
  }

  /** `t` with every field nullable, as Spark's file readers give their columns. */
  private def nullable(t: DataType): DataType = t match {
    case s: StructType => StructType(s.fields.map(f => f.copy(dataType = nullable(f.dataType), nullable = true)))
    case a: ArrayType => ArrayType(nullable(a.elementType), containsNull = true)
    case m: MapType => MapType(nullable(m.keyType), nullable(m.valueType), valueContainsNull = true)
    case other => other
  }
}

/**
 * The late records a query keeps, as a stream whose offset is a batch id of that query: it offers
 * a batch only once the query's commit log has it, since until then a rerun of the batch may
 * rewrite its directory. Each micro-batch reads the directories of the query's batches in (start,
 * end] that exist, as Spark's file source reads its files (a file relation marked streaming).
 */
private[sluice] final class LateRecordsSource(session: SparkSession, read: LateRecordsRead)
  extends Source with SupportsTriggerAvailableNow {

  /** Under `Trigger.AvailableNow`: the last batch the query had committed when the trigger started. */
  @volatile private var availableNowEnd: Option[Long] = None

  override def schema: StructType = read.schema
  override def getOffset: Option[Offset] = read.lastCommitted().map(LongOffset(_))

  override def prepareForTriggerAvailableNow(): Unit = availableNowEnd = Some(read.lastCommitted().getOrElse(-1L))

  override def latestOffset(start: OffsetV2, limit: ReadLimit): OffsetV2 =
    read.lastCommitted().map(last => availableNowEnd.fold(last)(math.min(last, _))).filter(_ >= 0)
      .map(LongOffset(_)).orNull

  override def getBatch(start: Option[Offset], end: Offset): DataFrame = {
    val dirs = read.batchDirs(start.map(LateRecordsSource.batchOf).getOrElse(-1L), LateRecordsSource.batchOf(end))
    if (dirs.isEmpty) DatasetAccess.ofRows(session,
      SparkNodes.emptyStreamingRelation(DataTypeUtils.toAttributes(
          read.schema)))
    else {
      val files = session.read.format(read.format).schema(read.schema).options(read.options)
        .option("basePath", read.path.toString).load(dirs.map(_.toString): _*)
      DatasetAccess.ofRows(session,
        files.queryExecution.analyzed.transform { case r: LogicalRelation => SparkNodes.streamingFileRelationOf(r) })
    }
  }

  override def stop(): Unit = ()
  override def toString: String = s"LateRecords[${read.path}, after ${read.checkpoint}]"
}

private[sluice] object LateRecordsSource {

  /** The batch id an offset of this source stands for (a LongOffset, or read back from the log). */
  def batchOf(offset: Offset): Long = offset.json.trim.toLong
}

/** Registers the late records stream as a Spark data source (`META-INF/services`), by its short name. */
private[sluice] final class LateRecordsSourceProvider extends StreamSourceProvider with DataSourceRegister {
  override def shortName(): String = SluiceConf.LateRecordsSource

  override def sourceSchema(sqlContext: SQLContext, schema: Option[StructType], providerName: String,
      parameters: Map[String, String]): (String, StructType) =
    (shortName(), LateRecordsRead.of(sqlContext.sparkSession, parameters, schema).schema)

  override def createSource(sqlContext: SQLContext, metadataPath: String, schema: Option[StructType],
      providerName: String, parameters: Map[String, String]): Source =
    new LateRecordsSource(sqlContext.sparkSession, LateRecordsRead.of(sqlContext.sparkSession, parameters, schema))
}
