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
