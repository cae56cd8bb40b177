package sluice.suppress

/**
 * A `shutDownWhenFull` buffer exceeded its bound. Thrown in the task before the state store
 * commits, so the batch is not committed: restarting on the checkpoint with a larger bound
 * reprocesses it with nothing lost.
 */
final class BufferFullException(
    val operator: String,
    val partition: Int,
    val records: Long,
    val maxRecords: Long,
    val bytes: Long,
    val maxBytes: Long)
  extends RuntimeException(
    s"suppress buffer of operator $operator is full in partition $partition: " +
      s"[records/max] = [$records/${BufferFullException.bound(maxRecords)}], " +
      s"[bytes/max] = [$bytes/${BufferFullException.bound(maxBytes)}]. " +
      "The buffer is configured with shut_down_when_full(); the batch was not committed, so " +
      "restarting on the same checkpoint with a larger bound (or another strategy) loses nothing.")

private object BufferFullException {
  def bound(v: Long): String = if (v == Long.MaxValue) "unbounded" else v.toString
}
