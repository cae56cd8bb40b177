package sluice.suppress

/** What a suppression buffer does when it holds more than its bound (KIP-328, plus spill-to-disk). */
sealed trait BufferFullStrategy { def name: String }
object BufferFullStrategy {

  /** Emit the oldest buffered rows (by buffer time) until the buffer is within its bound. */
  case object EmitEarly extends BufferFullStrategy { val name = "emit-early" }

  /** Fail the query; the batch is not committed, so a restart with a larger bound loses nothing. */
  case object ShutDown extends BufferFullStrategy { val name = "shut-down" }

  /** Keep the in-memory part within the bound and move the rest to local disk. */
  case object SpillToDisk extends BufferFullStrategy { val name = "spill-to-disk" }
}

/**
 * The bound of a suppression buffer, per partition of the operator: at most `maxRecords` rows and
 * `maxBytes` bytes (`Long.MaxValue` = no bound), and what to do when it is exceeded.
 *
 * As in Kafka Streams, the type says whether a config may emit early: an [[EagerBufferConfig]]
 * may, a [[StrictBufferConfig]] never does, and `untilWindowCloses` accepts only the latter.
 */
sealed abstract class BufferConfig {
  def maxRecords: Long
  def maxBytes: Long
  def whenFull: BufferFullStrategy

  def withMaxRecords(n: Long): BufferConfig
  def withMaxBytes(n: Long): BufferConfig
  def withNoBound(): StrictBufferConfig = StrictBufferConfig(Long.MaxValue, Long.MaxValue, BufferFullStrategy.ShutDown)
  def emitEarlyWhenFull(): EagerBufferConfig = EagerBufferConfig(maxRecords, maxBytes)
  def shutDownWhenFull(): StrictBufferConfig = StrictBufferConfig(maxRecords, maxBytes, BufferFullStrategy.ShutDown)
  def spillToDiskWhenFull(): StrictBufferConfig =
    StrictBufferConfig(maxRecords, maxBytes, BufferFullStrategy.SpillToDisk)

  def isBounded: Boolean = maxRecords != Long.MaxValue || maxBytes != Long.MaxValue

  override def toString: String = {
    def bound(v: Long) = if (v == Long.MaxValue) "unbounded" else v.toString
    s"BufferConfig(maxRecords=${bound(maxRecords)}, maxBytes=${bound(maxBytes)}, ${whenFull.name})"
  }
}

/** A config that emits early when full. */
final case class EagerBufferConfig(maxRecords: Long, maxBytes: Long) extends BufferConfig {
  BufferConfig.checkBound("maxRecords", maxRecords)
  BufferConfig.checkBound("maxBytes", maxBytes)
  def whenFull: BufferFullStrategy = BufferFullStrategy.EmitEarly
  def withMaxRecords(n: Long): EagerBufferConfig = copy(maxRecords = n)
  def withMaxBytes(n: Long): EagerBufferConfig = copy(maxBytes = n)
}

/** A config that never emits early: it shuts the query down or spills to disk when full. */
final case class StrictBufferConfig(maxRecords: Long, maxBytes: Long, whenFull: BufferFullStrategy)
  extends BufferConfig {
  BufferConfig.checkBound("maxRecords", maxRecords)
  BufferConfig.checkBound("maxBytes", maxBytes)
  require(whenFull != BufferFullStrategy.EmitEarly, "a strict buffer config never emits early")
  def withMaxRecords(n: Long): StrictBufferConfig = copy(maxRecords = n)
  def withMaxBytes(n: Long): StrictBufferConfig = copy(maxBytes = n)
}

object BufferConfig {

  /** At most `n` records per partition; emits early when full (change with `shutDownWhenFull` etc.). */
  def maxRecords(n: Long): EagerBufferConfig = EagerBufferConfig(n, Long.MaxValue)

  /** At most `n` bytes per partition; emits early when full. */
  def maxBytes(n: Long): EagerBufferConfig = EagerBufferConfig(Long.MaxValue, n)

  /** No bound (strict): the buffer grows with the number of open keys. */
  def unbounded(): StrictBufferConfig = StrictBufferConfig(Long.MaxValue, Long.MaxValue, BufferFullStrategy.ShutDown)

  private[suppress] def checkBound(name: String, v: Long): Unit =
    if (v < 0) throw new IllegalArgumentException(s"$name must be >= 0, got $v")
}
