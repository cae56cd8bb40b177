package sluice.conf

import org.apache.spark.sql.{Encoders, SparkSession}
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

import sluice.windowstore.WindowStoreSettings

class ConfResolverSuite extends AnyFunSuite with BeforeAndAfterAll {
  import ConfResolverSuite._

  private def source(kv: (String, String)*): ConfResolver.Source = kv.toMap.get

  test("the first source holding the key decides; none holding it gives the default") {
    val task = source(Delegate.key -> "hdfs")
    val conf = source(Delegate.key -> "in_memory_window")
    assert(ConfResolver.resolve(Delegate, Seq(task, conf)) == "hdfs")
    assert(ConfResolver.resolve(Delegate, Seq(source(), conf)) == "in_memory_window")
    assert(ConfResolver.resolve(Delegate, Seq(source(), source())) == Delegate.default)
  }

  test("a deprecated alias counts inside its source, where the new key wins") {
    val aliasOnly = source(Alias -> "2m")
    val both = source(Alias -> "2m", CacheBytes.key -> "3m")
    val later = source(CacheBytes.key -> "5m")
    assert(ConfResolver.resolve(CacheBytes, Seq(aliasOnly, later)) == (2L << 20))
    assert(ConfResolver.resolve(CacheBytes, Seq(both, later)) == (3L << 20))
    assert(SluiceConf.keysOf(CacheBytes) == Seq(CacheBytes.key, Alias))
  }

  test("a value of the wrong form names the key, the value and the form") {
    val e = intercept[SluiceConfException](ConfResolver.resolve(Delegate, Seq(source(Delegate.key -> "memory"))))
    assert(e.getMessage == s"Invalid value 'memory' for ${Delegate.key}: expected ${Delegate.expected}")
  }

  // The real sources: a local Spark, whose SparkConf says hdfs; the session overrides it.
  private var spark: SparkSession = _

  override def beforeAll(): Unit = {
    spark = SparkSession.builder().master("local[2]").appName("conf-resolver")
      .config("spark.ui.enabled", "false").config(Delegate.key, "hdfs").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
  }

  override def afterAll(): Unit = if (spark != null) spark.stop()

  private def inTasks[T: scala.reflect.ClassTag](f: => T): Set[T] =
    spark.sparkContext.parallelize(0 until 4, 2).map(_ => f).collect().toSet

  private def withSession[T](key: String, value: String)(f: => T): T = {
    spark.conf.set(key, value)
    try f
    finally spark.conf.unset(key)
  }

  test("on the driver: the active session, else the SparkConf") {
    SparkSession.setActiveSession(spark)
    assert(ConfResolver.get(Delegate) == "hdfs")
    withSession(Delegate.key, "in_memory_window") {
      assert(ConfResolver.get(Delegate) == "in_memory_window")
      SparkSession.clearActiveSession()
      try assert(ConfResolver.get(Delegate) == "hdfs")
      finally SparkSession.setActiveSession(spark)
    }
  }

  test("in a task: its local property, before the driver's session and the SparkConf") {
    withSession(Delegate.key, "in_memory_window") {
      val sc = spark.sparkContext
      sc.setLocalProperty(Delegate.key, "rocksdb")
      try assert(inTasks(ConfResolver.get(Delegate)) == Set("rocksdb"))
      finally sc.setLocalProperty(Delegate.key, null)
      // A job Spark runs without a session carries none of it: the task reads the SparkConf, never
      // the session the driver thread happens to have.
      assert(inTasks(ConfResolver.get(Delegate)) == Set("hdfs"))
    }
  }

  test("end to end: a query's tasks resolve its session's settings, as Spark propagates them") {
    def query: Set[String] =
      spark.range(0, 4, 1, 2).map(_ => ConfResolver.get(Delegate))(Encoders.STRING).collect().toSet
    assert(query == Set("hdfs"))
    withSession(Delegate.key, "in_memory_window")(assert(query == Set("in_memory_window")))
    withSession(Alias, "3m") {
      val budget = spark.range(0, 2, 1, 2).map(_ => MemoryBudget.current.toString)(Encoders.STRING).collect()
      assert(budget.forall(_.contains(s",${3L << 20},")), budget.mkString)
    }
  }

  test("every feature reads through it: the record cache's budget, the window store's settings") {
    val sc = spark.sparkContext
    val props = Map(CacheBytes.key -> "8m", SluiceConf.CommitIntervalMs.key -> "1s",
      SluiceConf.WindowStoreName.key -> "ws", SluiceConf.WindowStoreRetention.key -> "1h")
    props.foreach { case (k, v) => sc.setLocalProperty(k, v) }
    try {
      val slots = inTasks(MemoryBudget.taskSlots).head
      assert(inTasks(MemoryBudget.current.cacheMaxBytes) == Set(8L << 20))
      assert(inTasks(MemoryBudget.recordCacheBytes(ConfResolver.get(SluiceConf.CommitIntervalMs))) ==
        Set((8L << 20) / slots / 2))
      assert(inTasks(WindowStoreSettings.current()) == Set(WindowStoreSettings("ws", 3600000L, 10)))
    } finally props.keys.foreach(sc.setLocalProperty(_, null))
  }

  test("the executor plugin's gauges show the budget of the task started last") {
    import scala.jdk.CollectionConverters._
    import org.apache.spark.api.plugin.PluginContext
    val registry = new com.codahale.metrics.MetricRegistry
    val ctx = new PluginContext {
      override def metricRegistry() = registry
      override def conf() = spark.sparkContext.getConf
      override def executorID() = "probe"
      override def hostname() = "localhost"
      override def resources() = Map.empty[String, org.apache.spark.resource.ResourceInformation].asJava
      override def send(message: AnyRef): Unit = ()
      override def ask(message: AnyRef): AnyRef = null
    }
    val plugin = new sluice.plugin.internal.SluiceExecutorPlugin
    plugin.init(ctx, Map("executorCores" -> "2").asJava)
    Probe.plugin = plugin
    def gauge(name: String): Long = registry.getGauges.get(name).getValue.asInstanceOf[Long]
    val input = SluiceConf.InputBufferMaxBytes
    try {
      assert(gauge("inputBufferMaxBytes") == input.default)
      withSession(input.key, "64m") {
        spark.range(0, 1, 1, 1).map { _ => Probe.plugin.onTaskStart(); "" }(Encoders.STRING).collect()
      }
      assert(gauge("inputBufferMaxBytes") == (64L << 20))
      assert(gauge("taskSlots") == 2 && gauge("cacheMaxBytes") == CacheBytes.default)
    } finally plugin.shutdown()
  }
}

// Task closures refer to these, not to the suite (which is not serializable).
object ConfResolverSuite {
  private val Delegate = SluiceConf.StateStoreCacheDelegate
  private val CacheBytes = SluiceConf.StateStoreCacheMaxBytes
  private val Alias = SluiceConf.CacheMaxBytesBuffering.key

  /** The plugin under test, for the task closure (the plugin is not serializable). */
  object Probe { @volatile var plugin: sluice.plugin.internal.SluiceExecutorPlugin = _ }
}
