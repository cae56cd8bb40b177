package sluice.cache

import java.util.{ArrayDeque, HashMap => JHashMap}

import org.apache.spark.TaskContext

import sluice.plugin.MemoryBudget

/**
 * The executor's record caches: one per task slot, as Kafka Streams has one cache per stream thread
 * shared by all of its tasks. A task takes a free slot cache the first time one of its stores opens
 * and keeps it until it completes; every store the task opens shares it, so the executor holds at
 * most T caches of C/T bytes each (C = `spark.sluice.statestore.cache.max.bytes`, T task slots).
 *
 * The emission caches' byte share is accounted per slot the same way: the rows an emission-cache
 * partition keeps between batches count against the slot it last ran in, and a partition running
 * in a slot may hold only what the slot's other partitions leave (Kafka evicts from the cache being
 * written to until the thread's cache fits).
 */
object SlotCaches {
  // Grows to T caches once, under the lock; read without it (copy on write) by poolBytes.
  private val pool = new java.util.concurrent.CopyOnWriteArrayList[RecordCache]()
  private val free = new ArrayDeque[RecordCache]()
  private val byTask = new JHashMap[java.lang.Long, RecordCache]()
  // emission-cache partition -> (slot it last ran in, bytes it holds)
  private val emitHome = new JHashMap[AnyRef, (RecordCache, Long)]()
  @volatile private var peak = 0L

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
      val slots = MemoryBudget.current.taskSlots
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

  /** Bytes now held by all slot caches of this executor (state-store cache). */
  def executorBytes: Long = { var t = 0L; pool.forEach(c => t += c.sizeBytes); t }

  /** The largest [[executorBytes]] seen after any insert since the last [[resetPeak]]. */
  def peakBytes: Long = peak
  def resetPeak(): Unit = peak = 0L

  // Called by a slot cache under its own lock: executorBytes takes no lock (volatile sizes, a
  // copy-on-write pool), so there is no lock-order risk.
  private[cache] def observe(c: RecordCache): Unit = if (c.pooled) {
    val t = executorBytes
    if (t > peak) peak = t
  }

  /**
   * Bytes the emission-cache partition `id` may hold in this batch: `slotShare` minus what the
   * other partitions homed in the running task's slot hold. Moves `id`'s home to that slot.
   * Partitions for which `live` is false (their store was unloaded: query stopped) no longer count.
   */
  def emitShare(id: AnyRef, slotShare: Long, live: AnyRef => Boolean): Long = {
    val prev = synchronized(Option(emitHome.get(id)).map(_._1).orNull)
    val slot = forTask(prev)
    if (!slot.pooled) return 0L
    // `live` may ask the driver's coordinator: decided outside the lock other tasks take.
    val known = synchronized(emitHome.keySet().toArray)
    val stopped = known.filter(k => k != id && !live(k))
    synchronized {
      val held = Option(emitHome.get(id)).map(_._2).getOrElse(0L)
      emitHome.put(id, (slot, held))
      stopped.foreach(emitHome.remove)
      var others = 0L
      emitHome.forEach((k, v) => if ((v._1 eq slot) && (k != id)) others += v._2)
      math.max(0L, slotShare - others)
    }
  }

  /** Records the bytes partition `id` holds after its batch (0 forgets it). */
  def emitHeld(id: AnyRef, bytes: Long): Unit = synchronized {
    val home = emitHome.get(id)
    if (bytes == 0) emitHome.remove(id)
    else if (home != null) emitHome.put(id, (home._1, bytes))
  }

  /** Bytes held by all emission-cache partitions of this executor between batches. */
  def emitExecutorBytes: Long = synchronized { var t = 0L; emitHome.forEach((_, v) => t += v._2); t }
}
