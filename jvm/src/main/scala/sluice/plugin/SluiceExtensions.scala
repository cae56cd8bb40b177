package sluice.plugin

import org.apache.spark.sql.SparkSessionExtensions

import sluice.plugin.internal.{CheckpointProviderCheck, RealTimeAllowlist}

/**
 * `spark.sql.extensions=sluice.plugin.SluiceExtensions`: installs sluice's planner strategies
 * (suppress, emission cache), source rules (input bound), sluice's from_json decoding
 * (experimental), the refusal of checkpoints written with sliced state, and the check that refuses
 * a checkpoint of another state store provider when either is sluice's, into every session.
 */
class SluiceExtensions extends (SparkSessionExtensions => Unit) {
  override def apply(ext: SparkSessionExtensions): Unit = {
    // start() of a stateful query on a checkpoint of another state store provider, sluice's on either side
    ext.injectCheckRule(CheckpointProviderCheck.checkRule)
    // session windows in update mode (KIP-328's session scenario); its strategy before suppress's, so
    // that suppress over sessions under the real-time trigger is refused as the sessions are
    ext.injectHintResolutionRule(sluice.sessions.internal.SessionUpdateRule(_))
    ext.injectPlannerStrategy(sluice.sessions.internal.SessionUpdateStrategy(_))
    // suppress (KIP-328/539)
    ext.injectPlannerStrategy(sluice.suppress.internal.SuppressStrategy(_))
    ext.injectCheckRule(sluice.suppress.internal.SuppressChecks.checkRule)
    ext.injectTableFunction(sluice.suppress.internal.SuppressTableFunction.description) // SQL form
    // emission cache (KIP-63)
    ext.injectOptimizerRule(sluice.cache.internal.EmitCacheRule(_))
    ext.injectPlannerStrategy(sluice.cache.internal.EmitCacheStrategy(_))
    // real-time mode (Spark 4.3): Spark's operator allowlist with sluice's operators taken out
    ext.injectColumnar(RealTimeAllowlist.rule(_))
    // real-time mode: the aggregation below suppress judges lateness and evicts by suppress's clock
    ext.injectColumnar(sluice.suppress.internal.RealTimeEviction.rule(_))
    // input bound (KIP-770)
    ext.injectResolutionRule(session => new sluice.input.internal.InputBoundRule(session))
    // a checkpoint written with sliced state (spark.sluice.window.slicing.state, removed) fails at start
    ext.injectColumnar(sluice.slicing.internal.SlicedStateMarker.rule(_))
    // from_json decoded from the record's bytes (spark.sluice.json.decoder=sluice)
    ext.injectOptimizerRule(sluice.json.internal.JsonDecodeRule(_))
  }
}
