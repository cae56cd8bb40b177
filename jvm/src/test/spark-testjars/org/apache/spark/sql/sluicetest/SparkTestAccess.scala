package org.apache.spark.sql.sluicetest

import java.util.Properties
import java.util.concurrent.atomic.AtomicLong

import org.apache.spark.{TaskContext, TaskContextImpl}
import org.apache.spark.executor.TaskMetrics
import org.apache.spark.sql.classic.SparkSession

/**
 * What sluice's tests need of Spark's internals (hence the package): task contexts for tests that
 * call a state store provider directly, as an executor's task would (sluice's record cache takes
 * its slot cache, commit interval and delegate from the running task), and the session's state
 * store coordinator.
 */
object SparkTestAccess {

  /** Starts the session's state store coordinator (lazy in Spark), as Spark's store suites do. */
  def startCoordinator(spark: SparkSession): Unit = spark.streams.stateStoreCoordinator

  private val attemptIds = new AtomicLong(1L << 40)

  /** A context of a new task attempt (its own id) on `partitionId` with `localProperties`. */
  def newContext(partitionId: Int, localProperties: Map[String, String]): TaskContext = {
    val props = new Properties()
    localProperties.foreach { case (k, v) => props.setProperty(k, v) }
    new TaskContextImpl(0, 0, partitionId, attemptIds.incrementAndGet(), 0, 1, null, props, null,
      TaskMetrics.empty, 1)
  }

  /** Runs `f` on this thread as part of task `tc` (then restores the thread's previous context). */
  def within[T](tc: TaskContext)(f: => T): T = {
    val previous = TaskContext.get()
    TaskContext.setTaskContext(tc)
    try f
    finally if (previous == null) TaskContext.unset() else TaskContext.setTaskContext(previous)
  }

  /** Ends task `tc` successfully: its completion listeners run. */
  def complete(tc: TaskContext): Unit = within(tc)(tc.asInstanceOf[TaskContextImpl].markTaskCompleted(None))
}
