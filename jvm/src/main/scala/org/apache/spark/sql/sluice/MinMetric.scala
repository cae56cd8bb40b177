package org.apache.spark.sql.sluice

/** Minimum across tasks of the earliest time something is due, for `shouldRunAnotherBatch`. */
final class MinMetric extends org.apache.spark.util.AccumulatorV2[Long, Long] {
  private var min = Long.MaxValue
  override def isZero: Boolean = min == Long.MaxValue
  override def copy(): MinMetric = { val m = new MinMetric; m.min = min; m }
  override def reset(): Unit = min = Long.MaxValue
  override def add(v: Long): Unit = min = math.min(min, v)
  override def merge(other: org.apache.spark.util.AccumulatorV2[Long, Long]): Unit = other match {
    case o: MinMetric => add(o.min)
    case _ => throw new UnsupportedOperationException(s"cannot merge ${other.getClass}")
  }
  override def value: Long = min
}

object MinMetric {

  /** A driver-registered minimum: operators use it to learn, after a batch, when something is next due. */
  def registered(sc: org.apache.spark.SparkContext, name: String): MinMetric = {
    val m = new MinMetric
    m.register(sc, Some(name), countFailedValues = false)
    m
  }
}

/**
 * The least value over a stage's partitions, and how many partitions added theirs: a reader can tell
 * a value every partition contributed to (tasks of failed attempts are not counted) from a partial one.
 */
final class PartitionsMin extends org.apache.spark.util.AccumulatorV2[Long, Long] {
  private var min = Long.MaxValue
  private var added = 0
  override def isZero: Boolean = added == 0
  override def copy(): PartitionsMin = { val m = new PartitionsMin; m.min = min; m.added = added; m }
  override def reset(): Unit = { min = Long.MaxValue; added = 0 }
  override def add(v: Long): Unit = { min = math.min(min, v); added += 1 }
  override def merge(other: org.apache.spark.util.AccumulatorV2[Long, Long]): Unit = other match {
    case o: PartitionsMin => min = math.min(min, o.min); added += o.added
    case _ => throw new UnsupportedOperationException(s"cannot merge ${other.getClass}")
  }
  override def value: Long = min

  /** The least value if exactly `partitions` partitions added one each. */
  def over(partitions: Int): Option[Long] = if (added == partitions) Some(min) else None
}

object PartitionsMin {
  def registered(sc: org.apache.spark.SparkContext, name: String): PartitionsMin = {
    val m = new PartitionsMin
    m.register(sc, Some(name), countFailedValues = false)
    m
  }
}
