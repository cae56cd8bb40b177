package sluice.suppress

import java.time.Duration

/**
 * When `suppress` lets a buffered row through (KIP-328 / KIP-539). Durations are milliseconds.
 *
 *  - [[UntilWindowCloses]]: once the row's window closes (final results): by default when the
 *    watermark reaches its end (the grace period is the watermark delay); with `graceMs` (KIP-328's
 *    grace period, at most the delay) once stream time passes its end plus the grace;
 *  - [[UntilTimeLimit]]: once stream time (the largest `time_col` seen) is `limitMs` past the
 *    row's buffer time (its `time_col` when first buffered);
 *  - [[UntilWallClockTimeLimit]]: once the wall clock is `limitMs` past the time the key was
 *    first buffered, also in micro-batches without input.
 */
sealed trait Suppressed {
  def buffer: BufferConfig

  /** Optional name used in errors and logs. */
  def name: Option[String]
  def withName(name: String): Suppressed
  def describe: String
}

/**
 * `graceMs`: KIP-328's grace period of the window (`TimeWindows.ofSizeAndGrace`,
 * `SessionWindows.ofInactivityGapAndGrace`): the window closes once stream time (the largest event
 * time the query has seen) passes its end plus the grace, and rows for it after that are late:
 * dropped and counted. None: the grace is the watermark delay (the window closes when Spark's
 * watermark passes its end). It may not exceed the watermark delay (Spark drops a window's state
 * at the watermark); a larger one fails when the DataFrame is built.
 *
 * `lateRecords`: where the records dropped as late are kept (see [[LateRecords]]); None: they are
 * only counted.
 */
final case class UntilWindowCloses(buffer: StrictBufferConfig, name: Option[String] = None,
    graceMs: Option[Long] = None, lateRecords: Option[LateRecords] = None)
  extends Suppressed {
  graceMs.foreach(g => Suppressed.checkDuration(g, "grace period"))
  def withName(n: String): UntilWindowCloses = copy(name = Some(n))
  def withLateRecords(late: LateRecords): UntilWindowCloses = copy(lateRecords = Some(late))
  def withLateRecords(path: String, format: String): UntilWindowCloses = withLateRecords(LateRecords(path, format))
  def withLateRecords(path: String, format: String, options: java.util.Map[String, String]): UntilWindowCloses =
    withLateRecords(LateRecords.of(path, format, options))
  def describe: String = {
    val base = graceMs.fold(s"untilWindowCloses($buffer)")(g => s"untilWindowCloses($buffer, grace ${g}ms)")
    lateRecords.fold(base)(l => s"$base with ${l.describe}")
  }
}

final case class UntilTimeLimit(limitMs: Long, buffer: BufferConfig, name: Option[String] = None) extends Suppressed {
  Suppressed.checkDuration(limitMs)
  def withName(n: String): UntilTimeLimit = copy(name = Some(n))
  def describe: String = s"untilTimeLimit(${limitMs}ms, $buffer)"
}

final case class UntilWallClockTimeLimit(limitMs: Long, buffer: BufferConfig, name: Option[String] = None)
  extends Suppressed {
  Suppressed.checkDuration(limitMs)
  def withName(n: String): UntilWallClockTimeLimit = copy(name = Some(n))
  def describe: String = s"untilWallClockTimeLimit(${limitMs}ms, $buffer)"
}

object Suppressed {

  /** Final results: one row per window and key, once the window closes (grace = watermark delay). */
  def untilWindowCloses(buffer: StrictBufferConfig): UntilWindowCloses = UntilWindowCloses(buffer)

  /**
   * Final results with a grace period of their own (KIP-328): a window closes once stream time
   * passes its end plus `grace`, which must not exceed the watermark delay.
   */
  def untilWindowCloses(buffer: StrictBufferConfig, grace: Duration): UntilWindowCloses =
    UntilWindowCloses(buffer, graceMs = Some(toMillis(grace, "grace period")))
  def untilWindowCloses(buffer: StrictBufferConfig, graceMs: Long): UntilWindowCloses =
    UntilWindowCloses(buffer, graceMs = Some(graceMs))

  def untilTimeLimit(limit: Duration, buffer: BufferConfig): UntilTimeLimit = UntilTimeLimit(toMillis(limit), buffer)
  def untilTimeLimit(limitMs: Long, buffer: BufferConfig): UntilTimeLimit = UntilTimeLimit(limitMs, buffer)

  def untilWallClockTimeLimit(limit: Duration, buffer: BufferConfig): UntilWallClockTimeLimit =
    UntilWallClockTimeLimit(toMillis(limit), buffer)
  def untilWallClockTimeLimit(limitMs: Long, buffer: BufferConfig): UntilWallClockTimeLimit =
    UntilWallClockTimeLimit(limitMs, buffer)

  private def toMillis(d: Duration, what: String = "time limit"): Long = {
    if (d.isNegative) throw new IllegalArgumentException(s"$what must not be negative, got $d")
    d.toMillis
  }

  private[suppress] def checkDuration(ms: Long, what: String = "time limit"): Unit =
    if (ms < 0) throw new IllegalArgumentException(s"$what must not be negative, got ${ms}ms")
}
