package sluice.cache.internal

import scala.util.control.NonFatal

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.types.StructType

import sluice.cache.CachingStateStoreProvider
import sluice.spark.StateStoreTypes._
import sluice.spark.{ForwardingStore, OpenOptions, SparkShim}

/**
 * A writable store of `owner` at batch `version`. `writer` is the delegate's writable store, or null while
 * the delegate is only read (write-behind: opened read-only at its version; it becomes writable
 * when this batch must commit it). Until this store first needs the delegate writable (a commit, a
 * scan it cannot lay the logged rows over, a pass-through), rows leaving the cache go to the
 * provider's [[WriteBehindState]], even when `writer` is set from the start; from then on, those
 * rows have been written into it.
 *
 * Why not drain the logged rows into `writer` as soon as it is given: a read store of the same
 * provider, opened for the same batch, may still be read (Spark's restore reads its read store
 * while the save's write store is already open). Over a delegate whose read and write stores are
 * separate copies (HDFS-backed), that read store would find the rows neither in the log nor in its
 * own delegate store, and the batch would lose them.
 */
private[sluice] final class CachingStateStore(owner: CachingStateStoreProvider, override val version: Long,
    private var reader: ReadStateStore, private var writer: StateStore, cache: RecordCache, counters: StoreCounters,
    options: OpenOptions)
  extends ForwardingStore with DirtyWriter {
  private var done = false
  private var info: StateStoreCheckpointInfo = _
  private var keysAfter = -1L // the version's key count, set by commit
  private var drained = false // the logged rows are in `writer`; rows leaving the cache go there too
  private def writeBehind = owner.writeBehind
  private def families = owner.families
  cache.attach(owner, this) // takes this store's dirty rows if another store's insert evicts them

  private def inner: ReadStateStore = if (writer != null) writer else reader

  /** The delegate becomes writable: this batch commits it. */
  private def writable(): StateStore = {
    if (writer == null) {
      writer = SparkShim.upgradeStore(owner.delegate, reader, writeBehind.delegateVersion, None,
        OpenOptions(forceSnapshotOnCommit = options.forceSnapshotOnCommit))
      reader = writer
    }
    if (!drained) {
      writeBehind.drain().foreach { case (k, v) => toDelegate(k, v) }
      drained = true
    }
    writer
  }

  private def toDelegate(key: CacheKey, value: UnsafeRow): Unit = {
    counters.delegateWrites += 1
    if (value == null) writer.remove(key.key, key.colFamily) else writer.put(key.key, value, key.colFamily)
  }

  override def write(key: CacheKey, value: UnsafeRow): Unit = {
    if (key.owner ne owner) throw new IllegalStateException(
      s"sluice record cache: a pending write of ${key.owner} reached $this; failing the task rather than " +
        "writing it to another store")
    // Before the drain, a row goes behind the logged ones: written to the delegate now, it would be
    // overwritten by an older logged value of the same key.
    if (drained) toDelegate(key, value) else writeBehind.add(key, value)
  }

  // The task ended with this store still open: Spark aborts it; its rows must not outlive it.
  override def discarded(): Unit = owner.invalidate()

  override def id: StateStoreId = reader.id

  override def get(key: UnsafeRow, colFamilyName: String): UnsafeRow =
    owner.cachedGet(inner, cache, counters, key, colFamilyName, this)

  private def putDirty(key: UnsafeRow, value: UnsafeRow, colFamilyName: String): Unit = {
    counters.evictions +=
      cache.putDirty(CacheKey(colFamilyName, key.copy(), owner), value, owner.storeCapacity, this)
  }

  override def put(key: UnsafeRow, value: UnsafeRow, colFamilyName: String): Unit = {
    // As Spark's stores: a null value is refused (in the cache it would read as a remove).
    require(value != null, "Cannot put a null value")
    if (families.isCached(colFamilyName)) putDirty(key, value.copy(), colFamilyName)
    else writable().put(key, value, colFamilyName)
  }

  override def remove(key: UnsafeRow, colFamilyName: String): Unit =
    if (families.isCached(colFamilyName)) putDirty(key, null, colFamilyName)
    else writable().remove(key, colFamilyName)

  override def valuesIterator(key: UnsafeRow, colFamilyName: String): Iterator[UnsafeRow] =
    inner.valuesIterator(key, colFamilyName)
  override def putList(key: UnsafeRow, values: Array[UnsafeRow], colFamilyName: String): Unit =
    writable().putList(key, values, colFamilyName)
  override def merge(key: UnsafeRow, value: UnsafeRow, colFamilyName: String): Unit =
    writable().merge(key, value, colFamilyName)
  override def mergeList(key: UnsafeRow, values: Array[UnsafeRow], colFamilyName: String): Unit =
    writable().mergeList(key, values, colFamilyName)

  // Ordered and prefix scans read the delegate alone, so every pending write goes there first
  // (and the delegate commits this batch). A full scan of an unordered family (e.g. watermark
  // eviction) lays the write-behind rows over the delegate's instead, keeping the delegate unwritten.
  override def prefixScan(prefixKey: UnsafeRow, colFamilyName: String)
      : StateStoreIterator[UnsafeRowPair] = {
    writable()
    flush()
    writer.prefixScan(prefixKey, colFamilyName)
  }

  override def iterator(colFamilyName: String): StateStoreIterator[UnsafeRowPair] = {
    if (writer == null && families.isCached(colFamilyName) && families.unordered(colFamilyName)) {
      flush() // into the write-behind rows
      writeBehind.overlay(reader.iterator(colFamilyName), colFamilyName, _ => true)
    } else {
      writable()
      flush()
      writer.iterator(colFamilyName)
    }
  }

  override def createColFamilyIfAbsent(colFamilyName: String, keySchema: StructType,
      valueSchema: StructType, keyStateEncoderSpec: KeyStateEncoderSpec,
      useMultipleValuesPerKey: Boolean, isInternal: Boolean): Unit = {
    writable().createColFamilyIfAbsent(colFamilyName, keySchema, valueSchema, keyStateEncoderSpec,
      useMultipleValuesPerKey, isInternal)
    if (useMultipleValuesPerKey) cache.dropColumnFamily(colFamilyName, owner)
    families.learn(colFamilyName, keyStateEncoderSpec, useMultipleValuesPerKey)
  }

  override protected[sluice] def passThrough(colFamilyName: String): ReadStateStore = {
    writable()
    flush()
    writer
  }
  override protected def passThroughWrite(colFamilyName: String): StateStore = {
    passThrough(colFamilyName)
    cache.dropColumnFamily(colFamilyName, owner) // clean after the flush; the delete may void any of them
    writer
  }
  override protected[sluice] def registered(colFamilyName: String, keyStateEncoderSpec: KeyStateEncoderSpec,
      useMultipleValuesPerKey: Boolean): Unit = {
    if (useMultipleValuesPerKey) cache.dropColumnFamily(colFamilyName, owner)
    families.learn(colFamilyName, keyStateEncoderSpec, useMultipleValuesPerKey)
  }

  override def removeColFamilyIfExists(colFamilyName: String): Boolean = {
    val w = writable()
    cache.dropColumnFamily(colFamilyName, owner)
    families.removed(colFamilyName)
    w.removeColFamilyIfExists(colFamilyName)
  }

  private def flush(): Unit = if (cache.flush(this, owner)) counters.flushes += 1

  /**
   * Commits batch version `version + 1`. The delegate commits when this batch wrote it already,
   * when the commit interval is due, or when the rows changed since its last commit outgrow half
   * of the store's share; otherwise they are written to the version's write-behind file. Either
   * way the version's file records the delegate version it builds on (none when equal).
   */
  override def commit(): Long = {
    try {
      flush()
      val now = System.currentTimeMillis()
      val due = writer != null || owner.intervalMs <= 0 ||
        now - writeBehind.lastDelegateCommitMs >= owner.intervalMs || writeBehind.bytes > owner.storeShare / 2
      val newVersion = version + 1
      val d = if (due) {
        val w = writable()
        flush()
        val dv = w.commit()
        writeBehind.lastDelegateCommitMs = now
        counters.delegateCommits += 1
        keysAfter = w.metrics.numKeys
        writeBehind.delegateCommitted(keysAfter)
        dv
      } else {
        keysAfter = writeBehind.keysWithLogAndRelease(reader)
        writeBehind.delegateVersion
      }
      val rows = writeBehind.rows
      writeBehind.record(newVersion, d, rows)
      val delegateInfo = if (due && d == newVersion) Some(writer.getStateStoreCheckpointInfo()) else None
      info = delegateInfo.getOrElse(StateStoreCheckpointInfo(id.partitionId, newVersion, None, None))
      // The delegate reports its own version when it commits; Spark's validation counts batch versions.
      if (delegateInfo.isEmpty && owner.storeConf.commitValidationEnabled) {
        StateStore.reportCommitToCoordinator(newVersion, id, owner.hadoopConfiguration)
      }
      owner.committed(newVersion, info.stateStoreCkptId, d)
      cache.detach(owner)
      counters.sizeBytes = cache.ownerBytes(owner)
      counters.logRows = rows.size
      done = true
      newVersion
    } catch {
      case NonFatal(e) => cache.detach(owner); owner.invalidate(); throw e
    }
  }

  override def abort(): Unit = {
    cache.detach(owner)
    owner.invalidate()
    if (writer != null) writer.abort() else reader.release()
  }

  // Spark's own metrics as the delegate alone would report them: the key count after this batch
  // (with the logged rows when the delegate did not commit) and the memory of the cache's rows on
  // top of the delegate's. In a batch where the delegate did not commit, its custom metrics
  // describe its last commit, not this batch, and are left out.
  override def metrics: StateStoreMetrics = {
    val m = if (writer != null) writer.metrics
    else reader match {
      case s: StateStore => val r = s.metrics; StateStoreMetrics(r.numKeys, r.memoryUsedBytes, Map.empty)
      case _ => StateStoreMetrics(0L, 0L, Map.empty)
    }
    val cacheBytes = cache.ownerBytes(owner) + writeBehind.bytes
    StateStoreMetrics(if (keysAfter >= 0) keysAfter else m.numKeys, m.memoryUsedBytes + cacheBytes,
      m.customMetrics ++ counters.metrics)
  }

  override def getStateStoreCheckpointInfo(): StateStoreCheckpointInfo =
    if (info != null) info
    else inner match {
      case s: StateStore => s.getStateStoreCheckpointInfo()
      case _ => StateStoreCheckpointInfo(id.partitionId, version + 1, None, None)
    }
  override def hasCommitted: Boolean = done
  override def toString: String = s"CachingStateStore[$inner]"
}
