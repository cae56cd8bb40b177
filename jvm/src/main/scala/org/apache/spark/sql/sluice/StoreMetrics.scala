package org.apache.spark.sql.sluice

import org.apache.spark.SparkContext
import org.apache.spark.util.AccumulatorV2
import org.apache.spark.sql.execution.metric.{SQLMetric, SQLMetrics}
import org.apache.spark.sql.execution.streaming.operators.stateful.StatefulOperatorCustomMetric
import org.apache.spark.sql.execution.streaming.state.StateStoreCustomMetric

/**
 * A state-store custom metric averaged over the operator's stores instead of summed (e.g. a hit
 * ratio); a store that has nothing to say leaves the metric out of its map.
 */
case class AverageStoreMetric(name: String, desc: String) extends StateStoreCustomMetric {
  override def withNewDesc(newDesc: String): AverageStoreMetric = copy(desc = newDesc)
  override def createSQLMetric(sparkContext: SparkContext): SQLMetric = {
    val m = new CombinedMetric("avg")
    m.register(sparkContext, Some(desc), countFailedValues = false)
    m
  }
}

/** Custom SQLMetrics combined by max or average instead of sum (across tasks). */
final class CombinedMetric(kind: String) extends SQLMetric("sum", -1L) {
  private var sum = 0L
  private var count = 0L
  private var max = -1L
  override def copy(): CombinedMetric = {
    val m = new CombinedMetric(kind); m.sum = sum; m.count = count; m.max = max; m
  }
  override def reset(): Unit = { sum = 0; count = 0; max = -1 }
  override def isZero: Boolean = count == 0
  override def add(v: Long): Unit = if (v >= 0) { sum += v; count += 1; max = math.max(max, v) }
  override def set(v: Long): Unit = { reset(); add(v) }
  override def merge(other: AccumulatorV2[Long, Long]): Unit = other match {
    case o: CombinedMetric => sum += o.sum; count += o.count; max = math.max(max, o.max)
    case _ => throw new UnsupportedOperationException(s"cannot merge ${other.getClass}")
  }
  override def value: Long = if (count == 0) 0 else if (kind == "max") max else sum / count

  /** For an average: adds `total` over `n` observations. */
  def addMany(total: Long, n: Long): Unit = if (n > 0) {
    sum += total; count += n; max = math.max(max, total / n)
  }
}

/**
 * An operator metric that counts bytes: Spark shows it as a size (the sum over tasks, with the
 * smallest, median and largest task), where a plain sum metric would show a bare count.
 */
case class SizeOperatorMetric(name: String, desc: String) extends StatefulOperatorCustomMetric {
  override def createSQLMetric(sparkContext: SparkContext): SQLMetric = SQLMetrics.createSizeMetric(sparkContext, desc)
}

case class CombinedCustomMetric(name: String, desc: String, kind: String) extends StatefulOperatorCustomMetric {
  override def createSQLMetric(sparkContext: SparkContext): SQLMetric = {
    val m = new CombinedMetric(kind)
    m.register(sparkContext, Some(desc), countFailedValues = false)
    m
  }
}
