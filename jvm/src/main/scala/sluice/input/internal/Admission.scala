package sluice.input.internal

import scala.collection.mutable

/**
 * A partition of a source as admission control sees it: `available` units (Kafka records, rate
 * seconds) wait between the batch start and what the source itself would admit, each costing
 * about `meanBytes` with standard deviation `sdBytes`.
 */
private[sluice] final case class Lane(key: String, available: Long, meanBytes: Double, sdBytes: Double,
    samples: Double = Double.PositiveInfinity, cap: Long = Long.MaxValue) {
  def demand: Long = math.min(available, math.max(1L, cap))
}

/** Units admitted per lane, the bytes that is expected to be, and how many lanes were cut. */
private[sluice] final case class Plan(units: Map[String, Long], expectedBytes: Double, throttled: Int)

/**
 * Spreads a byte budget over the lanes that have data waiting (KIP-770 pauses only partitions
 * with buffered data). Lanes with nothing waiting get nothing and are never counted as throttled.
 * Every lane with data gets at least one unit, so no partition starves even when one record is
 * larger than its share. The budget is water-filled: lanes needing less than an equal share take
 * all they have and leave the rest to the others.
 *
 * Sizes are estimates, so the plan keeps a safety margin of `z` standard deviations of the total,
 * which keeps the real batch under the budget with high probability rather than on average. For n
 * records of a lane whose mean came from `samples` records, the variance of their total is
 * n sd^2 (independent records) + (n sd)^2 / samples (the error of the estimated mean); lanes may
 * share an estimate, so the errors of the means are added as if fully correlated.
 * A lane's `cap` (a slow start while few sizes are known) bounds its units below `available`.
 */
private[sluice] object Admission {
  val DefaultZ = 2.0

  def plan(lanes: Seq[Lane], budget: Long, z: Double = DefaultZ): Plan = {
    val waiting = lanes.filter(_.available > 0)
    if (waiting.isEmpty) return Plan(Map.empty, 0.0, 0)
    // The margin depends on how many units are admitted; a few rounds of fixed point suffice.
    var margin = 0.0
    var units = fill(waiting, budget.toDouble)
    for (_ <- 0 until 3) {
      val records = waiting.map(l => units(l.key) * l.sdBytes * l.sdBytes).sum
      val means = waiting.map(l => units(l.key) * l.sdBytes / math.sqrt(l.samples)).sum
      margin = z * math.sqrt(records + means * means)
      units = fill(waiting, math.max(0.0, budget - margin))
    }
    val expected = waiting.map(l => units(l.key) * l.meanBytes).sum
    Plan(units, expected, waiting.count(l => units(l.key) < l.available))
  }

  /** Water-filling on mean sizes: ascending demand, equal shares of what is left. */
  private def fill(waiting: Seq[Lane], budget: Double): Map[String, Long] = {
    val out = mutable.LinkedHashMap.empty[String, Long]
    var remaining = budget
    var left = waiting.size
    waiting.sortBy(l => l.demand * l.meanBytes).foreach { l =>
      val share = remaining / left
      val n =
        if (l.meanBytes <= 0 || l.demand * l.meanBytes <= share) l.demand
        else math.min(l.demand, math.max(1L, (share / l.meanBytes).toLong))
      out(l.key) = n
      remaining -= n * math.max(l.meanBytes, 0.0)
      left -= 1
    }
    out.toMap
  }
}

/**
 * Running size statistics of one lane's records, decayed per batch so that the estimate follows
 * a change in record sizes within a few batches.
 */
private[sluice] final case class SizeStats(count: Double, sum: Double, sumSq: Double) {
  def mean: Double = if (count > 0) sum / count else 0.0
  def sd: Double = if (count > 1) math.sqrt(math.max(0.0, sumSq / count - mean * mean)) else 0.0
  def decayedPlus(batch: SizeStats, keep: Double): SizeStats =
    SizeStats(count * keep + batch.count, sum * keep + batch.sum, sumSq * keep + batch.sumSq)
  def plus(o: SizeStats): SizeStats = decayedPlus(o, keep = 1.0)
  def minus(o: SizeStats): SizeStats = SizeStats(count - o.count, sum - o.sum, sumSq - o.sumSq)
}

private[sluice] object SizeStats {
  val Zero: SizeStats = SizeStats(0, 0, 0)
}
