package sluice

import java.nio.file.{Files, Path}
import java.util.concurrent.ConcurrentLinkedQueue

import scala.collection.mutable.ArrayBuffer
import scala.jdk.CollectionConverters._
import scala.reflect.ClassTag

import org.apache.commons.io.FileUtils
import org.apache.spark.sql.{DataFrame, Row, SparkSession}
import org.apache.spark.sql.execution.SparkPlan
import org.apache.spark.sql.execution.streaming.runtime.{IncrementalExecution, StreamingQueryWrapper}
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * What the plan-rule suites share (each tests its rule's rewrite, the plans it leaves alone, and why):
 * one local session per suite with sluice's extensions, as a user installs them, and helpers to set a
 * `spark.sluice.*` key for one test, to capture the `sluice.rewrites` lines saying why a rule left a plan
 * alone, and to plan a streaming query's micro-batch. Suites in the test JVM run one at a time and each
 * stops its session, so the others' builders get sessions of their own settings.
 */
trait PlanSuite extends AnyFunSuite with BeforeAndAfterAll {
  protected var spark: SparkSession = _

  override def beforeAll(): Unit = {
    super.beforeAll()
    // Two shuffle partitions and no adaptive execution: plans as the rules see them, without AQE's
    // wrapper nodes, and tiny inputs that finish in milliseconds.
    spark = SparkSession.builder().master("local[2]").appName(getClass.getSimpleName)
      .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
      .config("spark.sql.adaptive.enabled", "false")
      .config("spark.sql.extensions", "sluice.plugin.SluiceExtensions").getOrCreate()
  }

  override def afterAll(): Unit =
    try if (spark != null) spark.stop()
    finally {
      temps.foreach(d => FileUtils.deleteQuietly(d.toFile))
      super.afterAll()
    }

  private val temps = ArrayBuffer.empty[Path]

  /** A new directory (checkpoints, files), deleted after the suite. */
  protected def tempDir(prefix: String): Path = {
    val dir = Files.createTempDirectory(prefix)
    temps.synchronized(temps += dir)
    dir
  }

  /** `body` with the session's `kv` set, each key unset again after. */
  protected def withConf[T](kv: (String, String)*)(body: => T): T = {
    kv.foreach { case (k, v) => spark.conf.set(k, v) }
    try body
    finally kv.foreach { case (k, _) => spark.conf.unset(k) }
  }

  /** The nodes of class `T` in `plan`. */
  protected def nodes[T <: SparkPlan: ClassTag](plan: SparkPlan): Seq[T] = plan.collect { case p: T => p }

  /** The "LEVEL message" lines `sluice.rewrites` logs while `body` runs, and its result. */
  protected def logged[T](body: => T): (T, Seq[String]) = RewritesLog.capture(body)

  /**
   * `df`'s executed plan with expression and plan ids taken out: two plannings of one query, with a
   * rule on and off, compare equal when the rule left the plan as Spark made it.
   */
  protected def shape(df: DataFrame): String =
    df.queryExecution.executedPlan.toString.replaceAll("#\\d+L?", "#").replaceAll("plan_id=\\d+", "plan_id=")

  /** Rows sorted by their text, to compare results whatever the partitions' order. */
  protected def sorted(rows: Seq[Row]): Seq[String] = rows.map(_.toString).sorted

  /**
   * The last micro-batch's execution of `query` over a stream fed by `feed` (each call of `feed` one
   * batch, run to the end before the next), in `mode`, and every row the sink got. The query runs on
   * a new checkpoint and is stopped before this returns.
   */
  protected def lastBatch(query: DataFrame, mode: String)(feed: Seq[() => Any]): (IncrementalExecution, Seq[Row]) = {
    val rows = new ConcurrentLinkedQueue[Row]()
    val ckpt = tempDir("sluice-plan")
    val q = query.writeStream.outputMode(mode).option("checkpointLocation", ckpt.toString)
      .foreachBatch((ds: DataFrame, _: Long) => { ds.collect().foreach(rows.add); () }).start()
    try {
      feed.foreach { batch => batch(); q.processAllAvailable() }
      (q.asInstanceOf[StreamingQueryWrapper].streamingQuery.lastExecution, rows.asScala.toSeq)
    } finally q.stop()
  }
}
