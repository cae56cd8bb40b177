package sluice.plugin

import org.apache.spark.sql.SparkSessionExtensions

/**
 * `spark.sql.extensions=sluice.plugin.SluiceExtensions`: installs sluice's planner strategies
 * (suppress, emission cache) and source rules (input bound) into every session.
 */
class SluiceExtensions extends (SparkSessionExtensions => Unit) {
  override def apply(ext: SparkSessionExtensions): Unit = {
    // suppress (KIP-328/539)
    ext.injectPlannerStrategy(org.apache.spark.sql.sluice.SuppressStrategy(_))
    ext.injectCheckRule(org.apache.spark.sql.sluice.SuppressChecks.checkRule)
    ext.injectTableFunction(org.apache.spark.sql.sluice.SuppressTableFunction.description) // SQL form
    // emission cache (KIP-63)
    ext.injectOptimizerRule(org.apache.spark.sql.sluice.EmitCacheRule(_))
    ext.injectPlannerStrategy(org.apache.spark.sql.sluice.EmitCacheStrategy(_))
    // input bound (KIP-770)
    ext.injectResolutionRule(session => new sluice.input.InputBoundRule(session))
  }
}
