package sluice.windowstore

import java.nio.file.Files
import java.util.UUID

import scala.util.Random

import org.apache.hadoop.conf.Configuration
import org.json4s.{JDouble, JLong, JObject, JString}
import org.json4s.jackson.JsonMethods.{compact, render}

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.execution.streaming.runtime.StreamExecution
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String

/**
 * State-store benchmark of the in-memory window store against Spark's HDFS-backed provider and
 * RocksDB, one JVM per repeat, driven by bench/windowstore/bench_ops.py (through bench/harness.py,
 * which alternates the side order between repeats, computes the ratios and checks the targets).
 * Part 1 follows Spark's StateStoreBasicOperationsBenchmark: per side, a committed state of
 * `--state-rows` windowed keys, then versions of puts with 0-100% overwrites, removes (eviction),
 * gets and an empty version, each timed from getStore to commit (the per-batch cost), ns per row.
 * The sides run in the order given, a full unmeasured round first (JIT warm-up), then the
 * measured round. Part 3 measures the heap the window store retains per entry at `--memory-keys`
 * live keys of prefix-scanned (session-window) state, after a full GC, against the entries' key
 * and value bytes.
 *
 * Args: [--parts 1,3] [--sides windowstore,hdfs,rocksdb,ws-sparkfiles] [--state-rows 1000000]
 * [--batch-rows 100000] [--memory-keys 5000000]. Every figure is printed on stdout as one line
 * `WSBENCH {json}`; progress goes to stderr.
 */
object WindowStoreBenchmark {
  private val ProviderClasses = Map(
    "windowstore" -> classOf[InMemoryWindowStoreProvider].getName,
    "hdfs" -> "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb" -> "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")

  /** The window store with its files written through Spark's checkpoint file manager, as the
   *  built-in providers write theirs, to show what its own file path is worth. */
  private val ThroughSparkFiles = "ws-sparkfiles"
  private val FileManagerKey = "spark.sql.streaming.checkpointFileManagerClass"
  private val FileContextManager =
    "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"
  private val Marker = "WSBENCH "

  private val windowType = StructType(Seq(StructField("start", TimestampType), StructField("end", TimestampType)))
  private val keySchema = StructType(Seq(StructField("window", windowType), StructField("key", LongType)))
  private val valueSchema = StructType(Seq(StructField("count", LongType)))
  private val WindowsInState = 100

  /** Each put case runs this many times; the best is reported (as Spark's benchmark reports best). */
  private val Iterations = 3
  private val sec = 1000000L

  def main(args: Array[String]): Unit = {
    val opts = args.grouped(2).map { case Array(k, v) => k.stripPrefix("--") -> v }.toMap
    def int(name: String, default: Int) = opts.get(name).map(_.toInt).getOrElse(default)
    val parts = opts.getOrElse("parts", "1,3").split(",").map(_.trim.toInt).toSet
    val sides = opts.getOrElse("sides", s"windowstore,hdfs,rocksdb,$ThroughSparkFiles").split(",").map(_.trim).toSeq
    val unknown = sides.filterNot(s => ProviderClasses.contains(s) || s == ThroughSparkFiles)
    require(unknown.isEmpty, s"unknown sides ${unknown.mkString(", ")}")
    val spark = SparkSession.builder().master("local[2]").appName("windowstore-bench")
      .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
      .config("spark.sql.streaming.stateStore.maintenanceInterval", "600s")
      .getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    // RocksDB reports to the state store coordinator, which otherwise exists once a query runs.
    StateStoreCoordinatorRef.forDriver(org.apache.spark.SparkEnv.get, spark.sessionState.conf)
    try {
      if (parts(1)) operations(sides, int("state-rows", 1000000), int("batch-rows", 100000))
      if (parts(3)) retainedMemory(int("memory-keys", 5000000))
    } finally spark.stop()
  }

  /** One figure for the driver: a `WSBENCH` line of JSON on stdout. */
  private def emit(fields: (String, Any)*): Unit = {
    val json = JObject(fields.toList.map {
      case (k, v: String) => k -> JString(v)
      case (k, v: Double) => k -> JDouble(v)
      case (k, v: Long) => k -> JLong(v)
      case (k, v: Int) => k -> JLong(v.toLong)
      case (k, v) => throw new IllegalArgumentException(s"$k: $v")
    })
    println(Marker + compact(render(json)))
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

  private def operations(sides: Seq[String], stateRows: Int, batchRows: Int): Unit = {
    val keys = Array.tabulate(stateRows + batchRows)(i => key(i.toLong))
    val v = value(1L)
    val cases = Seq(0, 10, 50, 90, 100)
    // The first round only warms up the JIT for every side; the second is reported.
    for (round <- 0 to 1; side <- sides) {
      val p = newProvider(ProviderClasses.getOrElse(side, ProviderClasses("windowstore")),
        sparkFiles = side == ThroughSparkFiles)
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
      r("evict 10% of the state (remove) + commit") =
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
      if (round == 1) r.foreach { case (op, ns) => emit("part" -> 1, "side" -> side, "op" -> op, "ns_per_row" -> ns) }
      System.err.println(s"  part 1 round $round $side done")
      p.close()
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
    SessionLayout("window struct key",
      StructType(Seq(StructField("k", StringType),
          StructField("session_window", windowType))), windowed = true),
    SessionLayout("k + sessionStartTime key",
      StructType(Seq(StructField("k", StringType),
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
   * again ("built"); then four batches that do what Spark's session-window operator does for a
   * tenth of the group keys each, at most 250k (prefix scan, then put the updated session); the
   * heap after a full GC once more ("updated"). Each difference over the entries, against their
   * key + value bytes. The records a batch replaces are written over by the next batch's puts of
   * the same size, so "updated" includes the last batch's replaced records.
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
      val updatesPerBatch = math.min(250000, users / 10)
      val rnd = new Random(3)
      var scanned = 0L
      for (_ <- 1 to 4) {
        val s = p.getStore(version)
        for (_ <- 0 until updatesPerBatch) {
          val k = user(rnd.nextInt(users))
          val sessions = s.prefixScan(prefixProj(InternalRow(k))).map(pr => (pr.key.copy(), pr.value.getLong(2))).toList
          scanned += sessions.size
          val (key, count) = sessions.head
          val st = if (layout.windowed) key.getStruct(1, 2).getLong(0) else key.getLong(1)
          s.put(key, value(k, st, count + 1))
        }
        version = s.commit()
      }
      assert(scanned == 4L * updatesPerBatch * sessionsPerKey, s"$scanned sessions scanned")
      val updated = measure("updated")
      p.close()
      Seq(built, updated)
    }
    for ((name, segs, entries, kv, retained, reported) <- rows) {
      emit("part" -> 3, "point" -> name, "segments" -> segs, "entries" -> entries, "kv_bytes" -> kv,
        "retained_bytes" -> retained, "reported_bytes" -> reported)
    }
  }
}
