package org.apache.spark.sql.sluice

import java.util.UUID

import org.apache.spark.broadcast.Broadcast
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.classic.{SparkSession => ClassicSession}
import org.apache.spark.sql.execution.streaming.operators.stateful.StatefulOperatorStateInfo
import org.apache.spark.sql.execution.streaming.runtime.{IncrementalExecution, QueryExecutionThread, StreamExecution}
import org.apache.spark.util.{CompletionIterator, SerializableConfiguration}

/**
 * The stream-context lookup and state-store plumbing shared by sluice's native stateful operators
 * Stable surface:
 *  - [[SluiceStatefulNode]] for logical nodes, [[operatorId]] for their ids;
 *  - [[streamContext]]: `Some` while the running query plans a micro-batch, `None` otherwise
 *    (e.g. `df.explain()` before `start()`);
 *  - [[SluiceStateStoreExec]] for physical nodes.
 */
object StatefulOperatorSupport {

  /**
   * The Hadoop configuration tasks open sluice's own stores with, broadcast once per query run: a
   * store reads it only when its provider is created, while building and shipping a session's
   * configuration with every batch costs the driver time per batch (bench/cache/README.md). Weak
   * keys: the run id instance lives as long as its query, and the broadcast is cleaned up after it.
   */
  private val runConfs = new java.util.WeakHashMap[UUID, Broadcast[SerializableConfiguration]]()

  def runHadoopConf(session: SparkSession, runId: UUID): Broadcast[SerializableConfiguration] =
    runConfs.synchronized {
      Option(runConfs.get(runId)).getOrElse {
        val conf = session.sparkContext.broadcast(new SerializableConfiguration(session.sessionState.newHadoopConf()))
        runConfs.put(runId, conf)
        conf
      }
    }

  /** Spark's own operators that keep state across micro-batches (each gets one of Spark's operator ids). */
  def isSparkStateful(p: LogicalPlan): Boolean = p match {
    case a: Aggregate => a.child.isStreaming
    case j: Join => j.left.isStreaming && j.right.isStreaming
    case _: Deduplicate | _: DeduplicateWithinWatermark | _: FlatMapGroupsWithState |
        _: FlatMapGroupsInPandasWithState | _: TransformWithState | _: TransformWithStateInPySpark => true
    case l: GlobalLimit => l.isStreaming
    case _ => false
  }

  /** The id of `node` within `root` (the plan being executed), or None if it is not found. */
  def operatorId(node: SluiceStatefulNode, root: LogicalPlan): Option[Long] = {
    val nodes = root.collect { case n: SluiceStatefulNode if n.getClass == node.getClass => n }
    val byRef = nodes.indexWhere(_ eq node)
    val index = if (byRef >= 0) byRef else nodes.indexOf(node)
    if (index < 0) None else Some(node.operatorIdBase + index)
  }

  /**
   * The session that started the query running on this thread: Spark reads its real-time allowlist
   * switch from this session's conf at every batch (not from the query's own clone).
   */
  def startingSession(session: SparkSession): Option[SparkSession] = currentStream(session).map(_.sparkSession)

  /** The sink table of the query running on this thread. */
  def currentSink(session: SparkSession): Option[org.apache.spark.sql.connector.catalog.Table] =
    currentStream(session).flatMap(s => Option(s.sink))

  /** The value `key` was set to in `session` (None when it has its default). */
  def explicitSetting(session: SparkSession, key: String): Option[String] =
    session.asInstanceOf[ClassicSession].sessionState.conf.getAllConfs.get(key)

  /**
   * The StreamExecution whose batches `session` plans: the one running on this thread, or, when a batch's
   * plan is asked for on another thread (a user's `query.explain()` while the query plans its first
   * batch forces the plan there, and Spark keeps that plan for the batch), the running query whose
   * stream session `session` is. None for any other session (`df.explain()` before `start()`).
   */
  def currentStream(session: SparkSession): Option[StreamExecution] =
    Thread.currentThread() match {
      case t: QueryExecutionThread => streamOf(t)
      case _ => streamOfSession(session)
    }

  // The thread is an anonymous inner class of its StreamExecution: read the outer instance.
  private def streamOf(t: QueryExecutionThread): Option[StreamExecution] =
    t.getClass.getDeclaredFields.iterator
      .filter(f => classOf[StreamExecution].isAssignableFrom(f.getType))
      .flatMap { f => f.setAccessible(true); Option(f.get(t).asInstanceOf[StreamExecution]) }
      .nextOption()

  /**
   * The running query whose batches `session` plans, found among the JVM's query threads: a query
   * started from any session plans its batches in its own clone of that session, one per run.
   */
  private def streamOfSession(session: SparkSession): Option[StreamExecution] = {
    var root = Thread.currentThread().getThreadGroup
    while (root.getParent != null) root = root.getParent
    var threads = new Array[Thread](root.activeCount() + 16)
    var n = root.enumerate(threads, true)
    while (n == threads.length) {
      threads = new Array[Thread](threads.length * 2)
      n = root.enumerate(threads, true)
    }
    threads.iterator.take(n).collect { case t: QueryExecutionThread => t }.flatMap(streamOf).find { s =>
      (s.sparkSessionForStream eq session) || Option(s.lastExecution).exists(_.sparkSession eq session)
    }
  }

  /**
   * The context of the micro-batch now being planned for `node`, built the way Spark builds state
   * info for its own operators; None outside a running query.
   */
  def streamContext(session: SparkSession, node: SluiceStatefulNode): Option[StreamContext] =
    currentStream(session).flatMap(s => Option(s.lastExecution)).flatMap { exec =>
      operatorId(node, exec.optimizedPlan).orElse(operatorId(node, exec.analyzed))
        .map(id => new StreamContext(exec, stateInfo(exec, id)))
    }

  /**
   * A grouping key as Spark's aggregation planning groups it: floating-point values normalised
   * (-0.0 as 0.0, one NaN), which Spark's optimizer does only for the `Aggregate`s it knows.
   */
  def normalizedGroupingKey(e: org.apache.spark.sql.catalyst.expressions.NamedExpression)
      : org.apache.spark.sql.catalyst.expressions.NamedExpression =
    org.apache.spark.sql.catalyst.optimizer.NormalizeFloatingNumbers.normalize(e) match {
      case named: org.apache.spark.sql.catalyst.expressions.NamedExpression => named
      case other => org.apache.spark.sql.catalyst.expressions.Alias(other, e.name)(exprId = e.exprId)
    }

  /**
   * The number of map tasks of the nearest shuffle in `rdd`'s lineage (the tasks feeding each of its
   * partitions; real-time mode's pipelined shuffle is one too), or 1 when it reads no shuffle.
   */
  def upstreamTasks(rdd: org.apache.spark.rdd.RDD[_]): Int = {
    def find(r: org.apache.spark.rdd.RDD[_]): Option[Int] = r.dependencies.iterator.map {
      case s: org.apache.spark.ShuffleDependency[_, _, _] => Some(s.rdd.getNumPartitions)
      case d => find(d.rdd)
    }.collectFirst { case Some(n) => n }
    find(rdd).getOrElse(1)
  }

  /** `iter`, then `f` once it is exhausted (Spark's CompletionIterator is `private[spark]`). */
  def onCompletion[A](iter: Iterator[A])(f: => Unit): Iterator[A] = CompletionIterator[A, Iterator[A]](iter, f)

  /** State info of operator `id` in the micro-batch `exec` plans, as Spark builds it for its own operators. */
  def stateInfo(exec: IncrementalExecution, id: Long): StatefulOperatorStateInfo =
    StatefulOperatorStateInfo(
      exec.checkpointLocation,
      exec.runId,
      id,
      exec.currentBatchId,
      exec.numStateStores,
      exec.stateSchemaMetadatas.get(id),
      exec.currentStateStoreCkptId.get(id))
}
