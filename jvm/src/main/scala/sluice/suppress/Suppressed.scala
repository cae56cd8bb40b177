package sluice.suppress

import java.time.Duration

/**
 * When `suppress` lets a buffered row through (KIP-328 / KIP-539). Durations are milliseconds.
 *
 *  - [[UntilWindowCloses]]: once the watermark reaches the row's window end (final results);
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

final case class UntilWindowCloses(buffer: StrictBufferConfig, name: Option[String] = None) extends Suppressed {
  def withName(n: String): UntilWindowCloses = copy(name = Some(n))
  def describe: String = s"untilWindowCloses($buffer)"
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

  def untilTimeLimit(limit: Duration, buffer: BufferConfig): UntilTimeLimit = UntilTimeLimit(toMillis(limit), buffer)
  def untilTimeLimit(limitMs: Long, buffer: BufferConfig): UntilTimeLimit = UntilTimeLimit(limitMs, buffer)

  def untilWallClockTimeLimit(limit: Duration, buffer: BufferConfig): UntilWallClockTimeLimit =
    UntilWallClockTimeLimit(toMillis(limit), buffer)
  def untilWallClockTimeLimit(limitMs: Long, buffer: BufferConfig): UntilWallClockTimeLimit =
    UntilWallClockTimeLimit(limitMs, buffer)

  private def toMillis(d: Duration): Long = {
    if (d.isNegative) throw new IllegalArgumentException(s"time limit must not be negative, got $d")
    d.toMillis
  }

  private[suppress] def checkDuration(ms: Long): Unit =
    if (ms < 0) throw new IllegalArgumentException(s"time limit must not be negative, got ${ms}ms")
}
