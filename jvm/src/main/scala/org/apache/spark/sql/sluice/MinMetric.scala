package org.apache.spark.sql.sluice

/**
 * The least value the tasks of a stage added, and how many values they added (tasks of failed
 * attempts are not counted): the earliest time something is next due (`shouldRunAnotherBatch`), or
 * the least closing time over suppress's partitions, which counts only when every partition added
 * one ([[over]]).
 */
final class MinMetric extends org.apache.spark.util.AccumulatorV2[Long, Long] {
  private var min = Long.MaxValue
  private var added = 0
  override def isZero: Boolean = added == 0
  override def copy(): MinMetric = { val m = new MinMetric; m.min = min; m.added = added; m }
  override def reset(): Unit = { min = Long.MaxValue; added = 0 }
  override def add(v: Long): Unit = { min = math.min(min, v); added += 1 }
  override def merge(other: org.apache.spark.util.AccumulatorV2[Long, Long]): Unit = other match {
    case o: MinMetric => min = math.min(min, o.min); added += o.added
    case _ => throw new UnsupportedOperationException(s"cannot merge ${other.getClass}")
  }
  override def value: Long = min

  /** The least value if exactly `partitions` values were added (one per partition). */
  def over(partitions: Int): Option[Long] = if (added == partitions) Some(min) else None
}

object MinMetric {

  /** A driver-registered minimum: operators use it to learn, after a batch, what their tasks found. */
  def registered(sc: org.apache.spark.SparkContext, name: String): MinMetric = {
    val m = new MinMetric
    m.register(sc, Some(name), countFailedValues = false)
    m
  }
}
