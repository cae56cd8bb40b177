package sluice.conf

/**
 * Spark's real-time trigger (spark-4.3: stateful queries too): batches run for the checkpoint interval
 * while records flow through. What of sluice runs under it decides per row, inside the batch
 * (suppress until_window_closes and until_time_limit with an unbounded buffer); what works at batch
 * boundaries would hold rows for the whole interval and is refused when the query plans a batch,
 * with the texts below: the one source of every real-time refusal, so that each names the feature,
 * why, and what to use instead in the same words. Texts only, the same on every Spark minor, so in
 * the layer every refusing feature uses (suppress, sessions, input, plugin).
 */
object RealTimeMode {

  /** The refusal of `feature`, which works at batch boundaries, under the real-time trigger. */
  def refusal(feature: String, why: String, instead: String): String =
    s"$feature does not run under Spark's real-time trigger yet: $why, which a real-time batch reaches " +
      s"only at its checkpoint interval. $instead"

  /** The refusal of `feature` under the real-time trigger for a reason other than batch boundaries. */
  def unsupported(feature: String, why: String, instead: String): String =
    s"$feature does not run under Spark's real-time trigger: $why. $instead"

  /** What to use instead, for features that need micro-batches. */
  val UseMicroBatches: String = "Start the query with a processing-time trigger, e.g. " +
    "trigger(processingTime=\"1 second\"), which gives each window's final result within a few batches."

  /** `UseMicroBatches` continuing a sentence ("..., or start the query ..."). */
  def orUseMicroBatches: String = "or " + UseMicroBatches.head.toLower + UseMicroBatches.tail

  /**
   * The refusal when the user turned Spark's allowlist on explicitly: sluice's operators are not
   * on it, and Spark has no way to add them.
   */
  def allowlistRefusal(key: String): String = unsupported(
    "suppress",
    s"$key=true is set explicitly, and Spark's real-time operator allowlist has no entry for sluice's " +
      "operators (Spark offers no way to add one)",
    s"Unset $key: sluice then turns Spark's check off for this session and runs Spark's own check (its " +
      "errors) on every other operator and on the sink of each real-time query; " + orUseMicroBatches)

  /**
   * The refusal of a restart whose aggregation state, below suppress(until_window_closes), was
   * written in one of the forms `describe` names and would be read in another.
   */
  def stateSwitchRefusal(operator: String, found: Seq[String], now: Seq[String]): String =
    s"$operator cannot continue this checkpoint: the aggregation below it was written by ${describe(found)}, " +
      s"and this is ${describe(now)}. Under the real-time trigger that aggregation carries " +
      "hidden columns (each row's event time and, with late records kept, its record), so its state schema " +
      "differs between the two. Run the query as it was written, or start it on a new checkpoint."

  /** The form of the aggregation's state that hidden `columns` (RealTimeSuppress) give. */
  private def describe(columns: Seq[String]): String = columns.size match {
    case 0 => "a micro-batch run"
    case 1 => "a real-time run without late records kept"
    case _ => "a real-time run keeping late records"
  }
}
