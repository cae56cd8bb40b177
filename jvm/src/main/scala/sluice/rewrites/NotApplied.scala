package sluice.rewrites

import org.apache.spark.sql.SparkSession
import org.slf4j.LoggerFactory

/**
 * Why an experimental rewrite that is on left alone a plan it examined (as spark-rapids explains what
 * stayed on the CPU): one INFO line per rewrite and plan, through the logger `sluice.rewrites`, of the
 * form `sluice: <rewrite> did not apply to <node>: <why>` (several nodes of one plan: `; `-separated).
 * Each rewrite keeps its texts in one place (its `Why` object).
 *
 * Not repeated: a streaming query plans every micro-batch, and adaptive execution plans each stage,
 * so a line is logged once per query run (the SparkContext's local properties of the query's thread:
 * Spark's query id and the run's job group), else once per SQL execution; a plan with neither (an
 * `explain()`) logs every time. At most [[Remembered]] lines are remembered.
 */
private[sluice] object NotApplied {

  /** The logger's name, to set its level or capture its lines. */
  val LoggerName = "sluice.rewrites"
  private val logger = LoggerFactory.getLogger(LoggerName)

  private val QueryIdProperty = "sql.streaming.queryId"
  private val JobGroupProperty = "spark.jobGroup.id"
  private val ExecutionIdProperty = "spark.sql.execution.id"
  private val Remembered = 4096

  /** The line for `rewrite` leaving alone each (node, why) of one plan. */
  def line(rewrite: String, notes: Seq[(String, String)]): String =
    s"sluice: $rewrite did not apply to " + notes.map { case (node, why) => s"$node: $why" }.mkString("; ")

  /** A node as the line names it: its one-line description, shortened. */
  def describe(node: org.apache.spark.sql.catalyst.trees.TreeNode[_]): String = shorten(node.simpleString(8))

  /** `s`, cut to at most [[MaxNode]] characters. */
  def shorten(s: String): String = if (s.length <= MaxNode) s else s.take(MaxNode - 3) + "..."
  private val MaxNode = 200

  private val seen = new java.util.LinkedHashMap[(String, String), java.lang.Boolean](256, 0.75f, true) {
    override def removeEldestEntry(e: java.util.Map.Entry[(String, String), java.lang.Boolean]): Boolean =
      size() > Remembered
  }

  /** Logs the line of `notes` (none: nothing) unless it was logged for the same query run or execution. */
  def log(session: SparkSession, rewrite: String, notes: Seq[(String, String)]): Unit =
    if (notes.nonEmpty && logger.isInfoEnabled) {
      val text = line(rewrite, notes.distinct)
      // without expression ids: a micro-batch's planning may name its own grouping aliases anew
      val first = scope(session).forall { s =>
        seen.synchronized(seen.put((s, text.replaceAll("#\\d+L?", "#")), java.lang.Boolean.TRUE) == null)
      }
      if (first) logger.info(text)
    }

  /** Logs `text` once per JVM and `key` (for what no plan holds, such as a file system). */
  def logOnce(key: String, text: String): Unit =
    if (logger.isInfoEnabled && seen.synchronized(seen.put(("jvm:" + key, text), java.lang.Boolean.TRUE) == null)) {
      logger.info(text)
    }

  private def scope(session: SparkSession): Option[String] = {
    val sc = session.sparkContext
    def prop(k: String) = Option(sc.getLocalProperty(k))
    prop(QueryIdProperty).map(q => s"query:$q:${prop(JobGroupProperty).getOrElse("")}")
      .orElse(prop(ExecutionIdProperty).map("execution:" + _))
  }
}
