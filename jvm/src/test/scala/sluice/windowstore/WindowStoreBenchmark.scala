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
import org.apache.spark.unsafe.types.UTF8String

/**
 * Side-by-side benchmark of the in-memory window store, Spark's HDFS-backed provider and RocksDB
 * (bench/windowstore/run.sh). Part 1 follows Spark's StateStoreBasicOperationsBenchmark: per
 * provider, a committed state of `stateRows` windowed keys, then one version each of puts with
 * 0-100% overwrites, removes (eviction), and gets; each timed from getStore to commit (the
 * per-batch cost) and reported in ns per row. Part 2 runs a windowed count (no watermark) end to
 * end at a small and a large number of live keys and reports the per-batch time. Part 3 measures
 * the heap the window store retains per entry at `memoryKeys` live keys of prefix-scanned state
 * (session-window keys), after a full GC, against the entries' key and value bytes.
 *
 * Args: stateRows batchRows smallKeys largeKeys e2eBatchRows memoryKeys;
 * WSBENCH_PARTS=1,2,3 (comma-separated) runs a subset of the parts.
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
  private val Parts = sys.env.get("WSBENCH_PARTS").map(_.split(",").map(_.trim.toInt).toSet)
    .getOrElse(Set(1, 2, 3))

  private val windowType = StructType(Seq(StructField("start", TimestampType), StructField("end", TimestampType)))
  private val keySchema = StructType(Seq(StructField("window", windowType), StructField("key", LongType)))
  private val valueSchema = StructType(Seq(StructField("count", LongType)))
  private val WindowsInState = 100
  /** Each put case runs this many times; the best is reported (as Spark's benchmark reports best). */
  private val Iterations = 3
  private val sec = 1000000L

  def main(args: Array[String]): Unit = {
    val Array(stateRows, batchRows, smallKeys, largeKeys, e2eBatchRows, memoryKeys) =
      (args.map(_.toInt) ++ Array(1000000, 100000, 50000, 5000000, 20000, 5000000).drop(args.length)).take(6)
    val spark = SparkSession.builder().master("local[2]").appName("windowstore-bench")
      .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
      .config("spark.sql.streaming.stateStore.maintenanceInterval", "600s")
      .getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    // RocksDB reports to the state store coordinator, which otherwise exists once a query runs.
    StateStoreCoordinatorRef.forDriver(org.apache.spark.SparkEnv.get, spark.sessionState.conf)
    try {
      if (Parts(1)) {
        println(s"== Part 1: state store operations, $stateRows rows in state, $batchRows rows per version ==")
        operations(stateRows, batchRows)
        println()
      }
      if (Parts(2)) {
        println(s"== Part 2: windowed count end to end, no watermark, $e2eBatchRows input rows per batch ==")
        endToEnd(spark, Seq(smallKeys, largeKeys), e2eBatchRows)
        println()
      }
      if (Parts(3)) {
        println(s"== Part 3: heap retained per entry, $memoryKeys live keys of prefix-scanned (session-window) state ==")
        retainedMemory(memoryKeys)
      }
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

  // ---------------- Part 3 ----------------

  /**
   * Session-window state as the window store holds it: prefix = the group key `k` (a string), one
   * or more sessions per key, value = the session's row (k, session window, count) as Spark's
   * session-window operator stores it. Two key layouts: a window struct (segments by window start;
   * 100 distinct starts) and Spark's own state key, group key + session start timestamp (no window
   * struct: one segment).
   */
  private case class SessionLayout(name: String, keySchema: StructType, windowed: Boolean) {
    private val keyProj = UnsafeProjection.create(keySchema)
    def key(k: UTF8String, start: Long): UnsafeRow =
      keyProj(InternalRow(k, if (windowed) InternalRow(start, start + 10 * sec) else start))
  }
  private val sessionLayouts = Seq(
    SessionLayout("window struct key", StructType(Seq(StructField("k", StringType),
      StructField("session_window", windowType))), windowed = true),
    SessionLayout("k + sessionStartTime key", StructType(Seq(StructField("k", StringType),
      StructField("sessionStartTime", TimestampType, nullable = false))), windowed = false))
  private val sessionValueSchema = StructType(Seq(StructField("k", StringType),
    StructField("session_window", windowType), StructField("count", LongType)))
  private val prefixSchema = StructType(Seq(StructField("k", StringType)))

  private def heapAfterGc(): Long = {
    val bean = java.lang.management.ManagementFactory.getMemoryMXBean
    System.gc(); System.gc()
    bean.getHeapMemoryUsage.getUsed
  }

  /**
   * Per layout: the heap used after a full GC before the store exists; `liveKeys` entries (two
   * sessions per group key) put in versions of 250k and committed; the heap used after a full GC
   * again ("built"); then four batches that do what Spark's session-window operator does for 250k
   * group keys each (prefix scan, then put the updated session); the heap after a full GC once
   * more ("updated"). Each difference over the entries, against their key + value bytes. Updates
   * leave the replaced records in the pages until the segment is compacted (when its garbage
   * reaches twice its live records), so "updated" includes that garbage.
   */
  private def retainedMemory(liveKeys: Int): Unit = {
    val sessionsPerKey = 2
    val users = liveKeys / sessionsPerKey
    val valueProj = UnsafeProjection.create(sessionValueSchema)
    val prefixProj = UnsafeProjection.create(prefixSchema)
    def user(u: Int) = UTF8String.fromString(f"user-$u%07d")
    def start(u: Int, session: Int): Long = ((u * 7L + session * 50) % 100) * sec
    def value(k: UTF8String, st: Long, count: Long) =
      valueProj(InternalRow(k, InternalRow(st, st + 10 * sec), count))
    val rows = sessionLayouts.flatMap { layout =>
      val base = heapAfterGc()
      val p = new InMemoryWindowStoreProvider(Some(WindowStoreSettings("bench", 0L, 10)))
      p.init(StateStoreId(Files.createTempDirectory("wsmem").toString, 0, 0), layout.keySchema,
        sessionValueSchema, PrefixKeyScanStateEncoderSpec(layout.keySchema, 1), useColumnFamilies = false,
        new StateStoreConf(new SQLConf), new Configuration())
      var version = 0L
      /** (point, segments, entries, key+value bytes, retained bytes, windowStoreMemoryBytes). */
      def measure(point: String) = {
        val s = p.getStore(version)
        val reported = s.metrics.customMetrics(InMemoryWindowStoreProvider.MemoryBytesMetric)
        var entries = 0L
        var kvBytes = 0L
        s.iterator().foreach { pr => entries += 1; kvBytes += pr.key.getSizeInBytes + pr.value.getSizeInBytes }
        s.abort()
        val retained = heapAfterGc() - base
        assert(entries == liveKeys, s"$entries entries")
        (s"${layout.name}, $point", p.liveMap.numSegments, entries, kvBytes, retained, reported)
      }
      val usersPerBatch = 250000 / sessionsPerKey
      for (from <- 0 until users by usersPerBatch) {
        val s = p.getStore(version)
        for (u <- from until math.min(users, from + usersPerBatch); session <- 0 until sessionsPerKey) {
          val k = user(u)
          val st = start(u, session)
          s.put(layout.key(k, st), value(k, st, 1L))
        }
        version = s.commit()
      }
      val built = measure("built")
      val rnd = new Random(3)
      var scanned = 0L
      for (_ <- 1 to 4) {
        val s = p.getStore(version)
        for (_ <- 0 until 250000) {
          val k = user(rnd.nextInt(users))
          val sessions = s.prefixScan(prefixProj(InternalRow(k))).map(pr => (pr.key.copy(), pr.value.getLong(2))).toList
          scanned += sessions.size
          val (key, count) = sessions.head
          val st = if (layout.windowed) key.getStruct(1, 2).getLong(0) else key.getLong(1)
          s.put(key, value(k, st, count + 1))
        }
        version = s.commit()
      }
      assert(scanned == 4L * 250000 * sessionsPerKey, s"$scanned sessions scanned")
      val updated = measure("updated")
      p.close()
      Seq(built, updated)
    }
    println(f"${"layout, point"}%-36s${"segments"}%9s${"entries"}%10s${"key+value"}%11s${"retained"}%10s" +
      f"${"ratio"}%7s${"windowStoreMemoryBytes"}%24s  target retained <= 1.5x key+value")
    for ((name, segs, entries, kv, retained, reported) <- rows) {
      val ratio = retained.toDouble / kv
      println(f"$name%-36s$segs%9d$entries%10d${kv.toDouble / entries}%11.1f${retained.toDouble / entries}%10.1f" +
        f"$ratio%7.2f${reported.toDouble / entries}%24.1f  ${if (ratio <= 1.5) "met" else "missed"}")
    }
    println("(bytes per entry; retained = heap used after System.gc() twice minus the same before the store)")
  }

  private def median(xs: Seq[Long]): Double = {
    val s = xs.sorted
    if (s.length % 2 == 1) s(s.length / 2).toDouble else (s(s.length / 2 - 1) + s(s.length / 2)) / 2.0
  }
}
