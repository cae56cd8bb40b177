package sluice.plugin

import org.apache.spark.{SparkConf, SparkContext}
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

import sluice.cache.internal.{CacheMetrics, EmitCacheExec}
import sluice.suppress.internal.SuppressExec
import sluice.windowstore.InMemoryWindowStoreProvider

/**
 * sluice's custom metrics are typed by what they count, as Spark's UI shows them: a metric of bytes
 * is a size, every other one a count or sluice's own average/max kind. A metric named for bytes
 * shown as a bare number would read as a row count.
 */
class MetricKindsSuite extends AnyFunSuite with BeforeAndAfterAll {
  private var sc: SparkContext = _

  override def beforeAll(): Unit =
    sc = new SparkContext(new SparkConf().setMaster("local[1]").setAppName("metric-kinds").set("spark.ui.enabled",
        "false"))

  override def afterAll(): Unit = if (sc != null) sc.stop()

  private def bytesNamed(name: String): Boolean = name.endsWith("Bytes")

  test("operator metrics of bytes are sizes; counts are sums") {
    val metrics = SuppressExec.Metrics ++ EmitCacheExec.Metrics
    val kinds = metrics.map(m => m.name -> m.createSQLMetric(sc).metricType).toMap
    assert(kinds.keySet.exists(bytesNamed) && kinds.keySet.exists(n => n.endsWith("Total")))
    for ((name, kind) <- kinds if bytesNamed(name)) assert(kind == "size", s"$name is shown as $kind")
    for ((name, kind) <- kinds if name.endsWith("Total") || name.endsWith("Records")) {
      assert(kind == "sum", s"$name is shown as $kind")
    }
  }

  test("state store metrics of bytes are sizes") {
    val metrics = CacheMetrics.All ++ new InMemoryWindowStoreProvider().supportedCustomMetrics
    val bytes = metrics.filter(m => bytesNamed(m.name))
    assert(bytes.map(_.name).toSet.contains("windowStoreCompactionBytes"), bytes.map(_.name))
    for (m <- bytes) assert(m.createSQLMetric(sc).metricType == "size", s"${m.name} is shown as a count")
  }
}
