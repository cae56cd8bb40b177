package sluice.spark

/**
 * Spark's real-time trigger (spark-4.3: open to stateful queries): batches run for the checkpoint interval
 * while records flow through. sluice's operators release and forward rows at batch boundaries, so
 * under this trigger they would hold rows for the whole interval: they refuse it when the query's
 * first batch is planned, with the one text below.
 */
object RealTimeMode {
  /** The refusal of `feature` under the real-time trigger, saying why and what to use instead. */
  def refusal(feature: String, why: String, instead: String): String =
    s"$feature does not run under Spark's real-time trigger yet: $why, which a real-time batch reaches " +
      s"only at its checkpoint interval. $instead"

  /** What to use instead, for features that need micro-batches. */
  val UseMicroBatches: String = "Start the query with a processing-time trigger, e.g. " +
    "trigger(processingTime=\"1 second\"), which gives each window's final result within a few batches."
}
