package sluice.inspect

import java.nio.charset.StandardCharsets
import java.util.UUID

import scala.collection.immutable.NumericRange
import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import org.apache.commons.io.IOUtils
import org.apache.hadoop.fs.Path
import org.json4s._
import org.json4s.JsonDSL._
import org.json4s.jackson.JsonMethods.{compact, parse, render}

import org.apache.spark.sql.{DataFrame, Row, SparkSession}
import org.apache.spark.sql.catalyst.CatalystTypeConverters
import org.apache.spark.sql.types._

import sluice.cache.internal.EmitCacheStateLayout
import sluice.spark.CheckpointTypes.{CheckpointFileManager, CommitLog, OffsetSeqLog}
import sluice.spark.SparkSessions
import sluice.spark.SparkSessions.ClassicSession
import sluice.spark.StateStoreTypes._
import sluice.spark.{SparkSessionConf, SparkShim}
import sluice.state.Sidecars
import sluice.suppress.internal.SuppressStateLayout
import sluice.windowstore.{InMemoryWindowStoreProvider, WindowStoreSettings}
import sluice.windowstore.internal.WindowStoreView

/**
 * Reads a stopped (or running) query's sluice state from its checkpoint, on the driver, for
 * `sluice.inspect` (python/sluice/inspect.py, which composes the readable result):
 *  - [[summary]]: the last committed batch, its watermark and time, the next batch's watermark,
 *    the query's state store provider, and each operator's sidecar ([[Sidecars]]);
 *  - [[readStore]]: one store's rows as Spark's `statestore` reader lays them out (key, value,
 *    partition_id), for the stores that reader cannot open: the emission cache (always sluice's
 *    window store, whatever the query's provider) and suppress's spill store (always RocksDB);
 *  - [[windowStoreSegments]]: a window store's segments and stream time;
 *  - [[layouts]]: which operators are whose and how their rows lie, as each feature publishes it.
 * Each store is opened by a provider of its own, never registered with Spark's store registry, so
 * nothing here touches a running query's loaded stores or needs the state store coordinator.
 */
object StateInspector {

  /**
   * Makes the session ready for Spark's `statestore` reader: its tasks ask the state store
   * coordinator whether a store is active, and a SparkContext registers that endpoint only when
   * a session first creates its StreamingQueryManager. A session that never ran a query (a fresh
   * one, after the query's context was stopped) has none, and the read fails with "Cannot find
   * endpoint: spark://StateStoreCoordinator".
   */
  def prepare(spark: SparkSession): Unit = SparkSessions.classic(spark).streams

  /** JSON: batch ids, watermarks, batch time, provider and sidecars by operator id. */
  def summary(spark: SparkSession, checkpoint: String): String = {
    val session = SparkSessions.classic(spark)
    val root = new Path(checkpoint)
    val hadoopConf = session.sessionState.newHadoopConf()
    val fs = root.getFileSystem(hadoopConf)
    if (!fs.exists(root)) throw new IllegalArgumentException(s"no checkpoint at $checkpoint")
    def log[T](name: String, make: String => T): Option[T] = {
      val p = new Path(root, name)
      if (fs.exists(p)) Some(make(p.toString)) else None
    }
    val commits = log("commits", CommitLog(session, _))
    val offsets = log("offsets", OffsetSeqLog(session, _))
    val lastCommit = commits.flatMap(_.getLatest())
    val lastOffset = offsets.flatMap(_.getLatestBatchId())
    val committedMeta = lastCommit.flatMap(c => offsets.flatMap(SparkShim.offsetLogEntry(_, c._1)))
    val latestMeta = lastOffset.flatMap(b => offsets.flatMap(SparkShim.offsetLogEntry(_, b)))
    val conf = latestMeta.map(_.conf).getOrElse(Map.empty)

    val stateDir = new Path(root, "state")
    val sidecars: List[JField] = if (!fs.exists(stateDir)) Nil
    else {
      fs.listStatus(stateDir).toList.filter(_.isDirectory).flatMap { dir =>
        val f = new Path(dir.getPath, Sidecars.FileName)
        if (!fs.exists(f)) None
        else {
          val in = fs.open(f)
          val text =
            try IOUtils.toString(in, StandardCharsets.UTF_8)
            finally in.close()
          val doc = parse(text)
          Sidecars.checkFormat(f.toString, doc)
          Some(JField(dir.getPath.getName, doc))
        }
      }
    }
    val json = ("checkpoint" -> fs.makeQualified(root).toString) ~
      ("lastCommittedBatchId" -> lastCommit.map(_._1)) ~
      ("lastPlannedBatchId" -> lastOffset) ~
      ("batchWatermarkMs" -> committedMeta.map(_.batchWatermarkMs)) ~
      ("batchTimestampMs" -> committedMeta.map(_.batchTimestampMs)) ~
      ("nextBatchWatermarkMs" -> lastCommit.map(_._2.nextBatchWatermarkMs)) ~
      ("providerClass" -> conf.get(SparkSessionConf.ProviderClassKey)) ~
      ("sidecars" -> JObject(sidecars))
    compact(render(json))
  }

  /**
   * JSON: how each feature's state lies in a checkpoint, as the features publish it
   * ([[SuppressStateLayout]], [[EmitCacheStateLayout]]): per sluice operator kind its name in Spark's
   * state metadata, its operator ids (`[first, end)`) and its rows' columns; the ids of Spark's own
   * operators (below every sluice kind's), and the window store's provider class (which serves them
   * when it is the query's provider).
   */
  def layouts(): String = {
    def ids(r: NumericRange[Long]): List[Long] = List(r.start, r.end)
    val s = SuppressStateLayout
    val e = EmitCacheStateLayout
    val json =
      ("suppress" -> (("operatorName" -> s.OperatorName) ~ ("operatorIds" -> ids(s.OperatorIds)) ~
        ("keyColumn" -> s.KeyColumn) ~ ("bufferTimeColumn" -> s.BufferTimeColumn) ~ ("rowColumn" -> s.RowColumn) ~
        ("spillWhenFull" -> s.SpillWhenFull))) ~
        ("emitCache" -> (("operatorName" -> e.OperatorName) ~ ("operatorIds" -> ids(e.OperatorIds)) ~
          ("insertTimeColumn" -> e.InsertTimeColumn) ~ ("addedColumns" -> e.AddedColumns.toList))) ~
        ("sparkOperatorIds" -> List(0L, math.min(s.OperatorIds.start, e.OperatorIds.start))) ~
        ("windowStore" -> ("providerClass" -> classOf[InMemoryWindowStoreProvider].getName))
    compact(render(json))
  }

  /** Key and value schema of an operator's default store, from its state schema file (no data read). */
  def storeSchema(spark: SparkSession, checkpoint: String, operatorId: Long): StructType =
    spark.read.format("statestore").option("operatorId", operatorId).load(checkpoint).schema

  /**
   * Every row of store `storeName` of `operatorId` at `version`, over `numPartitions` partitions,
   * opened with `providerClass`: columns key, value (the store's schemas, as in `schemaFrom`, the
   * `storeSchema` of the operator's default store) and partition_id. Partitions without files
   * for the store are skipped (a spill store exists only where a partition spilled).
   */
  def readStore(spark: SparkSession, checkpoint: String, operatorId: Long, storeName: String,
      providerClass: String, numPartitions: Int, version: Long, schemaFrom: StructType): DataFrame = {
    val keySchema = schemaFrom("key").dataType.asInstanceOf[StructType]
    val valueSchema = schemaFrom("value").dataType.asInstanceOf[StructType]
    val session = SparkSessions.classic(spark)
    val storeConf = storeConfFor(session, checkpoint, providerClass)
    val toKey = CatalystTypeConverters.createToScalaConverter(keySchema)
    val toValue = CatalystTypeConverters.createToScalaConverter(valueSchema)
    val rows = (0 until numPartitions).flatMap { partition =>
      val id = StateStoreId(stateRoot(checkpoint), operatorId, partition, storeName)
      if (!exists(session, new Path(id.storeCheckpointLocation().toString))) Nil
      else {
        val hadoopConf = session.sessionState.newHadoopConf()
        val provider = StateStoreProvider.createAndInit(StateStoreProviderId(id, UUID.randomUUID()), keySchema,
          valueSchema, NoPrefixKeyStateEncoderSpec(keySchema), useColumnFamilies = false, storeConf, hadoopConf,
          useMultipleValuesPerKey = false, stateSchemaProvider = None)
        try {
          val store = provider.getReadStore(version, None)
          try {
            store.iterator().map { p =>
              Row(toKey(p.key.copy()), toValue(p.value.copy()), partition)
            }.toList
          } finally store.release()
        } finally provider.close()
      }
    }
    val schema = StructType(Seq(StructField("key", keySchema), StructField("value", valueSchema),
        StructField("partition_id", IntegerType, nullable = false)))
    spark.createDataFrame(rows.asJava, schema)
  }

  /** [[readStore]] for suppress's spill store, where [[SuppressStateLayout]] puts it. */
  def readSpillStore(spark: SparkSession, checkpoint: String, operatorId: Long, numPartitions: Int,
      version: Long, schemaFrom: StructType): DataFrame =
    readStore(spark, checkpoint, operatorId, SuppressStateLayout.SpillStoreName, SuppressStateLayout.SpillProviderClass,
      numPartitions, version, schemaFrom)

  /** [[readStore]] for an emission cache, where [[EmitCacheStateLayout]] puts it. */
  def readEmitCacheStore(spark: SparkSession, checkpoint: String, operatorId: Long, numPartitions: Int,
      version: Long, schemaFrom: StructType): DataFrame =
    readStore(spark, checkpoint, operatorId, EmitCacheStateLayout.StoreName, EmitCacheStateLayout.ProviderClass,
      numPartitions, version, schemaFrom)

  /**
   * The segments of the window store of `operatorId` at `version`, one row per partition and
   * window start: partition_id, window_start (null for window-less entries), rows, stream_time
   * (the partition's largest window start seen; null before any). Opened with `retentionMs`
   * (the query's `spark.sluice.windowstore.*`), which decides what loading expires.
   */
  def windowStoreSegments(spark: SparkSession, checkpoint: String, operatorId: Long, numPartitions: Int,
      version: Long, schemaFrom: StructType, name: String, retentionMs: Long): DataFrame = {
    val keySchema = schemaFrom("key").dataType.asInstanceOf[StructType]
    val valueSchema = schemaFrom("value").dataType.asInstanceOf[StructType]
    val session = SparkSessions.classic(spark)
    val storeConf = storeConfFor(session, checkpoint, classOf[InMemoryWindowStoreProvider].getName)
    val settings = WindowStoreSettings(name, retentionMs, snapshotInterval = 10)
    def ts(micros: Long): java.sql.Timestamp =
      if (micros == WindowStoreView.NoWindow) null
      else org.apache.spark.sql.catalyst.util.DateTimeUtils.toJavaTimestamp(micros)
    val rows = (0 until numPartitions).flatMap { partition =>
      val id = StateStoreId(stateRoot(checkpoint), operatorId, partition)
      if (!exists(session, new Path(id.storeCheckpointLocation().toString))) Nil
      else {
        val view = new WindowStoreView(id, keySchema, valueSchema, storeConf, session.sessionState.newHadoopConf(),
          settings)
        try {
          val (segments, streamTime) = view.segments(version)
          segments.map { case (start, n) => Row(partition, ts(start), n, ts(streamTime)) }
        } finally view.close()
      }
    }
    val schema = StructType(Seq(StructField("partition_id", IntegerType, nullable = false),
        StructField("window_start", TimestampType), StructField("rows", LongType, nullable = false),
        StructField("stream_time", TimestampType)))
    spark.createDataFrame(rows.asJava, schema)
  }

  private def stateRoot(checkpoint: String): String = new Path(checkpoint, "state").toString

  private def exists(session: ClassicSession, p: Path): Boolean =
    try CheckpointFileManager.create(p, session.sessionState.newHadoopConf()).exists(p)
    catch { case NonFatal(_) => false }

  /**
   * The store conf the query ran with (the SQL conf its offset log recorded), with `providerClass`
   * and plain batch-id versions (the stores read here never use checkpoint ids).
   */
  private def storeConfFor(session: ClassicSession, checkpoint: String, providerClass: String): StateStoreConf = {
    val offsets = new Path(checkpoint, "offsets")
    SparkSessionConf.sideStoreConf(session.sessionState.conf, providerClass,
      conf =>
        if (exists(session, offsets)) SparkShim.applyRecordedConf(OffsetSeqLog(session, offsets.toString), conf))
  }
}
