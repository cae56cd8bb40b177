package org.apache.spark.sql.sluice

import org.apache.spark.SparkContext
import org.apache.spark.sql.execution.metric.SQLMetric
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
