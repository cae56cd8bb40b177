package sluice.windowstore

import java.nio.file.Files
import java.util.UUID

import scala.util.Random

import org.apache.hadoop.conf.Configuration

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.execution.streaming.runtime.StreamExecution
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.functions.{col, window}
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types._

/**
 * Side-by-side benchmark of the in-memory window store, Spark's HDFS-backed provider and RocksDB
 * (bench/windowstore/run.sh). Part 1 follows Spark's StateStoreBasicOperationsBenchmark: per
 * provider, a committed state of `stateRows` windowed keys, then one version each of puts with
 * 0-100% overwrites, removes (eviction), and gets; each timed from getStore to commit (the
 * per-batch cost) and reported in ns per row. Part 2 runs a windowed count (no watermark) end to
 * end at a small and a large number of live keys and reports the per-batch time.
 *
 * Args: stateRows batchRows smallKeys largeKeys e2eBatchRows
 */
object WindowStoreBenchmark {
  private val AllProviders = Seq(
    "windowstore" -> classOf[InMemoryWindowStoreProvider].getName,
    "hdfs" -> "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb" -> "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
  /** Part 1 also runs the window store with its files written through Spark's checkpoint file
   *  manager, as the built-in providers write theirs, to show what its own file path is worth. */
  private val ThroughSparkFiles = "ws-sparkfiles"
  private val FileManagerKey = "spark.sql.streaming.checkpointFileManagerClass"
  private val FileContextManager =
    "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"
  /** WSBENCH_PROVIDERS=windowstore (comma-separated) runs a subset, e.g. under a profiler. */
  private val Providers = sys.env.get("WSBENCH_PROVIDERS").map(_.split(",").toSet)
    .map(only => AllProviders.filter(p => only(p._1))).getOrElse(AllProviders)

  private val windowType = StructType(Seq(StructField("start", TimestampType), StructField("end", TimestampType)))
  private val keySchema = StructType(Seq(StructField("window", windowType), StructField("key", LongType)))
  private val valueSchema = StructType(Seq(StructField("count", LongType)))
  private val WindowsInState = 100
  /** Each put case runs this many times; the best is reported (as Spark's benchmark reports best). */
  private val Iterations = 3
  private val sec = 1000000L

  def main(args: Array[String]): Unit = {
    val Array(stateRows, batchRows, smallKeys, largeKeys, e2eBatchRows) =
      (args.map(_.toInt) ++ Array(1000000, 100000, 50000, 5000000, 20000).drop(args.length)).take(5)
    val spark = SparkSession.builder().master("local[2]").appName("windowstore-bench")
      .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
      .config("spark.sql.streaming.stateStore.maintenanceInterval", "600s")
      .getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    // RocksDB reports to the state store coordinator, which otherwise exists once a query runs.
    StateStoreCoordinatorRef.forDriver(org.apache.spark.SparkEnv.get, spark.sessionState.conf)
    try {
      println(s"== Part 1: state store operations, $stateRows rows in state, $batchRows rows per version ==")
      operations(stateRows, batchRows)
      println()
      println(s"== Part 2: windowed count end to end, no watermark, $e2eBatchRows input rows per batch ==")
      endToEnd(spark, Seq(smallKeys, largeKeys), e2eBatchRows)
    } finally spark.stop()
  }

  // ---------------- Part 1 ----------------

  private val keyProj = UnsafeProjection.create(keySchema)
  private val valueProj = UnsafeProjection.create(valueSchema)
  private def key(i: Long): UnsafeRow = {
    val w = (i % WindowsInState) * 10 * sec
    keyProj(InternalRow(InternalRow(w, w + 10 * sec), i)).copy()
  }
  private def value(v: Long): UnsafeRow = valueProj(InternalRow(v)).copy()

  private def newProvider(cls: String, sparkFiles: Boolean = false): StateStoreProvider = {
    val p = StateStoreProvider.create(cls)
    val hadoopConf = new Configuration()
    if (sparkFiles) hadoopConf.set(FileManagerKey, FileContextManager)
    hadoopConf.set(StreamExecution.RUN_ID_KEY, UUID.randomUUID().toString)
    val sqlConf = new SQLConf
    sqlConf.setConfString(SQLConf.STATE_STORE_PROVIDER_CLASS.key, cls)
    val dir = Files.createTempDirectory("wsbench").toString
    p.init(StateStoreId(dir, 0, 0), keySchema, valueSchema, NoPrefixKeyStateEncoderSpec(keySchema),
      useColumnFamilies = false, new StateStoreConf(sqlConf), hadoopConf)
    p
  }

  private def timeNs(f: => Unit): Long = { val t = System.nanoTime(); f; System.nanoTime() - t }

  private def operations(stateRows: Int, batchRows: Int): Unit = {
    val keys = Array.tabulate(stateRows + batchRows)(i => key(i.toLong))
    val v = value(1L)
    val cases = Seq(0, 10, 50, 90, 100)
    val results = scala.collection.mutable.LinkedHashMap[String, Map[String, Double]]()
    // The first round only warms up the JIT for all providers; the second is reported.
    val part1 = Providers ++ Providers.filter(_._1 == "windowstore").map(p => ThroughSparkFiles -> p._2)
    for (round <- 0 to 1; (name, cls) <- part1) {
      val p = newProvider(cls, sparkFiles = name == ThroughSparkFiles)
      var version = 0L
      def batch(f: StateStore => Unit): Long = {
        val ns = timeNs {
          val s = p.getStore(version)
          f(s)
          version = s.commit()
        }
        ns
      }
      // Load the state in chunks (RocksDB and HDFS commit per version, as a stream would).
      keys.take(stateRows).grouped(200000).foreach(chunk => batch(s => chunk.foreach(k => s.put(k, v))))
      // Warm up the code paths on a throwaway overwrite batch.
      batch(s => keys.take(batchRows).foreach(k => s.put(k, v)))
      val r = scala.collection.mutable.LinkedHashMap[String, Double]()
      val rnd = new Random(42)
      for (pct <- cases; _ <- 1 to Iterations) {
        val overwrites = batchRows.toLong * pct / 100
        val fresh = batchRows - overwrites
        // Overwrites hit existing keys; new keys are removed again afterwards to keep the state size.
        val existing = Array.fill(overwrites.toInt)(keys(rnd.nextInt(stateRows)))
        val added = keys.slice(stateRows, stateRows + fresh.toInt)
        val ns = batch { s => existing.foreach(k => s.put(k, v)); added.foreach(k => s.put(k, v)) }
        val op = s"put $pct% overwrite + commit"
        r(op) = math.min(r.getOrElse(op, Double.MaxValue), ns.toDouble / batchRows)
        batch(s => added.foreach(k => s.remove(k)))
      }
      val toEvict = keys.take(stateRows).filter(k => k.getStruct(0, 2).getLong(0) < 10 * sec * (WindowsInState / 10))
      r(s"evict ${toEvict.length} rows (remove) + commit") =
        batch(s => toEvict.foreach(k => s.remove(k))).toDouble / toEvict.length
      batch(s => toEvict.foreach(k => s.put(k, v)))
      val gets = Array.fill(batchRows)(keys(rnd.nextInt(stateRows)))
      r("get (existing keys)") = {
        val s = p.getStore(version)
        val ns = timeNs(gets.foreach(k => assert(s.get(k) != null)))
        s.abort()
        ns.toDouble / batchRows
      }
      // The per-version constant (file creation and rename on the checkpoint file system), shown
      // per batch row so it can be read against the put rows above.
      r("empty version + commit (per batch row)") = (1 to Iterations).map(_ => batch(_ => ())).min.toDouble / batchRows
      if (round == 1) results(name) = r.toMap
      println(f"  round $round $name%-12s done")
      p.close()
    }
    val rows = results.head._2.keys.toSeq.sortBy(k => (!k.startsWith("put"), k.length, k))
    println(f"${"operation (ns/row)"}%-42s${"windowstore"}%14s${"hdfs"}%14s${"rocksdb"}%14s${"hdfs/ws"}%10s${"rocksdb/ws"}%12s" +
      f"${ThroughSparkFiles}%16s${"hdfs/wsspf"}%11s${"rocksdb/wsspf"}%14s")
    for (op <- rows) {
      def of(name: String) = results.get(name).map(_(op)).getOrElse(Double.NaN)
      val ws = of("windowstore"); val h = of("hdfs"); val rk = of("rocksdb"); val spf = of(ThroughSparkFiles)
      println(f"$op%-42s$ws%14.1f$h%14.1f$rk%14.1f${h / ws}%10.2f${rk / ws}%12.2f$spf%16.1f${h / spf}%11.2f${rk / spf}%14.2f")
    }
    println(s"($ThroughSparkFiles: the window store writing its files through Spark's $FileContextManager, " +
      "as the built-in providers do, instead of java.nio on the local file system)")
  }

  // ---------------- Part 2 ----------------

  private def endToEnd(spark: SparkSession, liveKeys: Seq[Int], batchRows: Int): Unit = {
    import spark.implicits._
    val batches = 5
    val table = scala.collection.mutable.LinkedHashMap[(String, Int), Seq[Long]]()
    for (n <- liveKeys; (name, cls) <- Providers) {
      val dir = Files.createTempDirectory("wse2e")
      val in = dir.resolve("in").toString
      // Batch 0 creates n live windowed keys; later batches update half existing, add half new.
      def writeBatch(i: Int, from: Long, count: Long, updateEvery: Long): Unit = {
        spark.range(count).select(
          (((col("id") * updateEvery + from) % 1000L) * 10L).cast("timestamp").as("ts"),
          ((col("id") * updateEvery + from) / 1000L).cast("long").as("k"))
          .coalesce(1).write.parquet(s"$in/b$i")
      }
      writeBatch(0, 0L, n.toLong, 1L)
      spark.conf.set(SQLConf.STATE_STORE_PROVIDER_CLASS.key, cls)
      val q = spark.readStream.schema("ts TIMESTAMP, k LONG").option("maxFilesPerTrigger", 1)
        .parquet(s"$in/*")
        .groupBy(window($"ts", "10 seconds"), $"k").count()
        .writeStream.outputMode("update").format("noop")
        .option("checkpointLocation", dir.resolve("ckpt").toString).start()
      q.processAllAvailable()
      val times = (1 to batches).map { i =>
        val rnd = new Random(i)
        // half updates of existing keys (stride), half new keys beyond n
        writeBatch(i, rnd.nextInt(1000).toLong, batchRows / 2, math.max(1L, n.toLong / batchRows))
        spark.range(batchRows / 2).select(
          (((col("id") + n.toLong + i * batchRows) % 1000L) * 10L).cast("timestamp").as("ts"),
          ((col("id") + n.toLong + i * batchRows) / 1000L + 1000000L).cast("long").as("k"))
          .coalesce(1).write.mode("append").parquet(s"$in/b$i")
        q.processAllAvailable()
        val p = q.lastProgress
        (p.durationMs.get("triggerExecution").longValue(), p.stateOperators.head.numRowsTotal)
      }
      q.stop()
      spark.conf.unset(SQLConf.STATE_STORE_PROVIDER_CLASS.key)
      val ms = times.map(_._1).drop(1) // first measured batch warms up
      table((name, n)) = ms
      println(f"  $name%-12s live keys ${times.last._2}%9d  batch ms ${ms.mkString(" ")}")
    }
    println()
    println(f"${"provider"}%-12s" + liveKeys.map(n => f"${s"median ms @ $n"}%20s").mkString + f"${"large/small"}%14s")
    for ((name, _) <- Providers) {
      val med = liveKeys.map(n => median(table((name, n))))
      println(f"$name%-12s" + med.map(m => f"$m%20.0f").mkString + f"${med.last / med.head}%14.2f")
    }
  }

  private def median(xs: Seq[Long]): Double = {
    val s = xs.sorted
    if (s.length % 2 == 1) s(s.length / 2).toDouble else (s(s.length / 2 - 1) + s(s.length / 2)) / 2.0
  }
}
