package sluice.cache.internal

import java.util.{HashMap => JHashMap}

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.UnsafeRow

import sluice.state.KeyedRows

/**
 * One partition's emission cache for one micro-batch (Kafka Streams' caching in front of
 * downstream forwarding, KIP-63). The latest row per key is held; all held rows are forwarded
 * together once the oldest has waited `intervalMs` (batch time, so a replayed batch does the same),
 * and least recently updated rows are forwarded early when the held bytes exceed `maxBytes`.
 * Held rows live in `store`, so a restart loses nothing; `index` describes them (see [[EmitCacheIndex]]).
 *
 * Every decision is a function of the held rows and the batch's updates as a set, never of the order
 * the updates arrive in (a shuffle may deliver them in another order when a batch is replayed):
 * recency is the batch of a key's last update, ties broken by the key's bytes, and the share is
 * applied once the batch's updates are in. Between batches the cache holds at most `maxBytes`;
 * during one it also holds that batch's updates.
 */
private[sluice] final class EmitCache(layout: EmitCacheLayout, store: KeyedRows, index: EmitCacheIndex,
    maxBytes: Long, intervalMs: Long, batchMs: Long, batchId: Long) {
  private final class Entry(val key: UnsafeRow, val value: UnsafeRow, val inStore: Boolean)
  // This batch's updates, latest per key.
  private val pending = new JHashMap[UnsafeRow, Entry]()
  // Recency of this batch's updates; the shift keeps the scale of checkpoints that stored a
  // per-update sequence number below the batch id.
  private val seq = batchId << 32
  private var forwarded, absorbed, evicted = 0L
  private var nextDueMs = Long.MaxValue

  /** Takes one updated row of `key` (a copy the cache may keep). */
  def update(key: UnsafeRow, row: InternalRow): Unit = {
    val prev = pending.get(key)
    val (insertMs, inStore) = if (prev != null) {
      absorbed += 1 // the previous update of this key is replaced without being forwarded
      (layout.insertMs(prev.value), prev.inStore)
    } else {
      val held = store.get(key)
      if (held == null) (batchMs, false)
      else {
        absorbed += 1
        index.remove(EmitCacheIndex.slot(layout, key, held))
        (layout.insertMs(held), true)
      }
    }
    pending.put(key, new Entry(key, layout.encode(row, insertMs, seq), inStore))
  }

  /**
   * Applies the share and the interval and returns the rows forwarded (least recently updated
   * first), as the caller pulls them. Once the iterator is exhausted the store and `index` are up
   * to date and [[stats]] is final.
   */
  def finish(): Iterator[InternalRow] = {
    pending.values().forEach(e => index.add(EmitCacheIndex.slot(layout, e.key, e.value)))
    overShare ++ {
      val oldest = index.oldestInsertMs
      if (oldest != Long.MaxValue && oldest + intervalMs <= batchMs) all
      else {
        pending.values().forEach(e => store.put(e.key, e.value))
        pending.clear()
        if (oldest != Long.MaxValue) nextDueMs = oldest + intervalMs
        Iterator.empty
      }
    }
  }

  /** Forwards the least recently updated held rows while the held bytes exceed the share. */
  private def overShare: Iterator[InternalRow] = new Iterator[InternalRow] {
    override def hasNext: Boolean = index.bytes > maxBytes && !index.isEmpty
    override def next(): InternalRow = { evicted += 1; forwardNext() }
  }

  /** Forwards every held row, least recently updated first. */
  private def all: Iterator[InternalRow] = new Iterator[InternalRow] {
    override def hasNext: Boolean = !index.isEmpty
    override def next(): InternalRow = forwardNext()
  }

  // Real time: the recency of each update within the batch (after the batch's own `seq`).
  private var rowSeq = 0L

  /**
   * Under the real-time trigger (a batch lasting the checkpoint interval, rows arriving one at a
   * time): takes one update of `key` straight into the store and returns what is due at `nowMs`, in
   * the same call, as Kafka Streams' cache decides per record. Held rows are forwarded together once
   * the oldest has waited the interval on the task's clock (the batch's timestamp is its start), the
   * least recently updated early while the partition's share is exceeded. Decisions depend on
   * arrival order and the clock, so a rerun after a failure may forward other intermediate updates;
   * the latest value of every key still reaches the sink (Spark's real-time sink is at least once).
   */
  def updateNow(key: UnsafeRow, row: InternalRow, nowMs: Long): Iterator[InternalRow] = {
    val held = store.get(key)
    val insertMs = if (held == null) nowMs
    else {
      absorbed += 1
      index.remove(EmitCacheIndex.slot(layout, key, held))
      layout.insertMs(held)
    }
    rowSeq += 1
    val value = layout.encode(row, insertMs, seq + rowSeq)
    store.put(key, value)
    index.add(EmitCacheIndex.slot(layout, key, value))
    dueAt(nowMs)
  }

  /** Real time: what is due at `nowMs` (see [[updateNow]]); after the last row, the next due time in [[stats]]. */
  def dueAt(nowMs: Long): Iterator[InternalRow] = overShare ++ {
    val oldest = index.oldestInsertMs
    val due = oldest != Long.MaxValue && oldest + intervalMs <= nowMs
    nextDueMs = if (oldest == Long.MaxValue || due) Long.MaxValue else oldest + intervalMs
    if (due) all else Iterator.empty
  }

  /** Removes the least recently updated held row and returns its output row. */
  private def forwardNext(): InternalRow = {
    val slot = index.pollFirst()
    val key = new UnsafeRow(layout.keySchema.length)
    key.pointTo(slot.key, slot.key.length)
    val e = pending.remove(key)
    val row = layout.decode(if (e != null) e.value else store.get(key)) // a copy: the store may reuse its row
    if (e == null || e.inStore) store.remove(key)
    forwarded += 1
    row
  }

  def stats: EmitCacheStats = EmitCacheStats(forwarded, absorbed, evicted, index.bytes, index.size.toLong, nextDueMs)
}

/** One partition's figures after one batch (the operator's metrics; `nextDueMs` feeds its no-data batches). */
private[sluice] final case class EmitCacheStats(forwarded: Long, absorbed: Long, evicted: Long, bytes: Long,
    entries: Long, nextDueMs: Long)
