package org.apache.spark.sql.sluice

/**
 * Event-time progress in band under the real-time trigger: rows that tell each suppress partition how
 * far an upstream task has read, sent through the aggregation's own shuffle.
 *
 * A suppress partition's clock of an upstream task moves with the rows it gets from that task
 * (sluice.suppress.internal.StreamTimeCloser), and a task sends a partition only the rows of that
 * partition's keys: after a window's end passes, a partition waits for the next row of its own keys
 * with a new largest event time before it can close the window, although the task has long moved on.
 * So each upstream task also sends every shuffle partition a progress row: when it starts its batch, and
 * right after the row that takes its largest event time past a window end plus the grace (the only
 * moments a close decision can change).
 * The rows travel in the same channel as the task's data rows, behind them: a partition that reads a
 * progress row has every row the task sent it before. Out-of-band signals (accumulators, RPC) could
 * overtake rows still in the shuffle writer's buffer and close a window with rows on their way (Flink's
 * watermarks are in band for the same reason).
 *
 * A progress row has the aggregation's row shape: a window that no event can have (start and end at
 * [[WindowBaseMicros]] + j, a few hundred thousand years from now) whose j the planner chose so that the
 * shuffle's own partitioning sends it to partition p, and the task's hidden (upstream, event time)
 * column set to its largest event time. The aggregation forwards it without touching its state, suppress
 * moves the task's clock by it and drops it: it is never a result nor a state row, and no row metric of
 * the aggregation or of suppress counts it. It is a function of the task's own rows in their order, so
 * a rerun batch sends the same progress rows at the same points.
 */
// In the bridge because the aggregation's stages here read it, and the bridge uses no sluice package.
object ProgressRows {

  /** The first window start (µs) of a progress row; real event times are below year 10000 (2.6e17 µs). */
  val WindowBaseMicros: Long = Long.MaxValue - (1L << 24)

  /** Whether a window ending at `endMicros` is a progress row's. */
  def isProgress(endMicros: Long): Boolean = endMicros >= WindowBaseMicros

  /**
   * The closing boundaries of one upstream task's windows: tumbling windows of `sizeMicros` ending at
   * `phaseMicros` modulo the size, closed once stream time reaches their end plus `graceMicros`.
   * [[step]] is the number of boundaries at or below `t`: it grows exactly when a window closes.
   */
  final class Boundaries(sizeMicros: Long, phaseMicros: Long, graceMicros: Long) {
    require(sizeMicros > 0, s"a window of $sizeMicros µs")
    def step(t: Long): Long = Math.floorDiv(t - graceMicros - phaseMicros, sizeMicros)
  }

  object Boundaries {

    /** The boundaries of the windows like [`startMicros`, `endMicros`), closed `graceMicros` after their end. */
    def of(startMicros: Long, endMicros: Long, graceMicros: Long): Boundaries = {
      val size = endMicros - startMicros
      new Boundaries(size, Math.floorMod(endMicros, size), graceMicros)
    }
  }
}
