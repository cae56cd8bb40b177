package sluice.cache.internal

import java.util.{ArrayDeque, HashMap => JHashMap}

import org.apache.spark.TaskContext

import sluice.conf.MemoryBudget

/**
 * The executor's record caches: one per task slot, as Kafka Streams has one cache per stream thread
 * shared by all of its tasks. A task takes a free slot cache the first time one of its stores opens
 * and keeps it until it completes; every store the task opens shares it, so the executor holds at
 * most T caches of C/T bytes each (C = `spark.sluice.statestore.cache.max.bytes`, T task slots).
 *
 * The emission cache does not share slots this way: its early forwarding changes what the sink
 * receives, so its share must not depend on what else runs in the slot (see
 * `EmitCacheExec.partitionShare`). The record cache only changes when rows reach the delegate,
 * never what a read returns, so sharing the slot is safe for it.
 */
private[sluice] object SlotCaches {
  // Grows to T caches once, under the lock; read without it (copy on write) by poolBytes.
  private val pool = new java.util.concurrent.CopyOnWriteArrayList[RecordCache]()
  private val free = new ArrayDeque[RecordCache]()
  private val byTask = new JHashMap[java.lang.Long, RecordCache]()

  /**
   * The slot cache of the running task: the one it already holds, else `preferred` if free (the
   * slot the store used last, whose rows are still valid), else any free one. Without a task, or
   * with more running tasks than slots, an unpooled cache that holds nothing (capacity 0).
   */
  def forTask(preferred: RecordCache): RecordCache = {
    val tc = TaskContext.get()
    if (tc == null) return new RecordCache(pooled = false)
    synchronized {
      val id = java.lang.Long.valueOf(tc.taskAttemptId())
      val held = byTask.get(id)
      if (held != null) return held
      val slots = MemoryBudget.taskSlots
      while (pool.size < slots) { val c = new RecordCache(pooled = true); pool.add(c); free.add(c) }
      val c =
        if (preferred != null && free.remove(preferred)) preferred
        else if (!free.isEmpty) free.poll()
        else new RecordCache(pooled = false)
      byTask.put(id, c)
      tc.addTaskCompletionListener[Unit](_ => release(id, c))
      c
    }
  }

  private def release(id: java.lang.Long, c: RecordCache): Unit = {
    // Stores the task opened but neither committed nor aborted: their rows may be of a version
    // that never commits, so they go (discarded() drops them and forgets the cached version).
    c.detachAll().foreach(_.discarded())
    synchronized {
      byTask.remove(id)
      if (c.pooled) free.add(c)
    }
  }

  /** Bytes now held by all slot caches of this executor (the plugin's gauge `cacheBytes`). */
  def executorBytes: Long = { var t = 0L; pool.forEach(c => t += c.sizeBytes); t }

  /**
   * An upper bound of the most the slot caches of this executor ever held at once (the plugin's
   * gauge `cachePeakBytes`): the sum of each slot cache's own peak, which it keeps as it inserts,
   * so no put does executor-wide work. It shows that the budget held during batches, not only
   * between them.
   */
  def peakBytes: Long = { var t = 0L; pool.forEach(c => t += c.peakBytes); t }
}
