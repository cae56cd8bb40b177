package sluice.cache

import java.util.Collections

import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration
import org.apache.spark.{SparkEnv, TaskContext}
import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types.StructType

import sluice.conf.{SluiceConf, SluiceConfException}
import sluice.conf.MemoryBudget

/**
 * A [[StateStoreProvider]] that puts Kafka Streams' record cache (KIP-63) in front of another
 * provider, chosen by `spark.sluice.statestore.cache.delegate`.
 *
 * Design (why it is correct):
 *  - Point operations (get/put/remove) on single-value column families go through the byte-bounded
 *    LRU [[RecordCache]] of the task's slot ([[SlotCaches]]), shared with the other stores the
 *    slot's tasks use. Writes are dirty entries, coalesced per key, written to the delegate when
 *    evicted or just before the delegate's commit; an abort drops them. So between tasks a slot
 *    cache holds only clean, committed rows, which the next task's stores evict LRU as they need room.
 *  - Scans (iterator, prefixScan, range scans through prefixScan/iterator on range encoders) first
 *    flush every dirty entry into the delegate and then read the delegate alone, so they see exactly
 *    what the delegate would without the cache. Flushing keeps the design simple; it costs coalescing
 *    only for operators that scan in the same batch they write (e.g. watermark eviction).
 *  - Multi-value column families (list state: merge/valuesIterator) are passed through uncached.
 *  - Cached rows describe one version: they stay valid only while this instance continues from the
 *    version (and checkpoint id) it committed itself, in the same slot cache. Loading any other
 *    version, aborting, a failed commit, or opening in another slot drops this store's rows, so a
 *    reload, a replayed batch or a restart never reads a stale row.
 */
class CachingStateStoreProvider extends StateStoreProvider {
  import CachingStateStoreProvider._

  private var delegate: StateStoreProvider = _
  private var delegateName: String = _
  private var marker: DelegateMarker = _
  // The slot cache holding this store's rows (null before the first store opens).
  private var home: RecordCache = _
  // The version (and its checkpoint id) the cache's rows belong to; -1 when empty/unknown.
  private var cachedVersion = -1L
  private var cachedCkptId: Option[String] = None
  // Column families known to hold one value per key: only those are cached.
  private val singleValueFamilies = Collections.synchronizedSet(new java.util.HashSet[String]())

  override def init(
      stateStoreId: StateStoreId,
      keySchema: StructType,
      valueSchema: StructType,
      keyStateEncoderSpec: KeyStateEncoderSpec,
      useColumnFamilies: Boolean,
      storeConfs: StateStoreConf,
      hadoopConf: Configuration,
      useMultipleValuesPerKey: Boolean,
      stateSchemaProvider: Option[StateSchemaProvider]): Unit = {
    val name = currentDelegate()
    marker = new DelegateMarker(stateStoreId.storeCheckpointLocation(), hadoopConf)
    marker.check(name) // before the delegate reads anything another kind of store wrote
    delegateName = name
    delegate = StateStoreProvider.create(delegateClassName(name))
    delegate.init(stateStoreId, keySchema, valueSchema, keyStateEncoderSpec, useColumnFamilies,
      storeConfs, hadoopConf, useMultipleValuesPerKey, stateSchemaProvider)
    if (!useMultipleValuesPerKey) singleValueFamilies.add(StateStore.DEFAULT_COL_FAMILY_NAME)
  }

  override def stateStoreId: StateStoreId = delegate.stateStoreId

  override def close(): Unit = {
    invalidate()
    delegate.close()
  }

  override def getStore(version: Long, stateStoreCkptId: Option[String]): StateStore = {
    val slot = prepare(version, stateStoreCkptId)
    new CachingStateStore(delegate.getStore(version, stateStoreCkptId), slot, new Counters)
  }

  override def getReadStore(version: Long, uniqueId: Option[String]): ReadStateStore = {
    val slot = prepare(version, uniqueId)
    new CachingReadStore(delegate.getReadStore(version, uniqueId), slot)
  }

  override def upgradeReadStoreToWriteStore(
      readStore: ReadStateStore, version: Long, uniqueId: Option[String]): StateStore = {
    val (inner, counters) = readStore match {
      case r: CachingStateStoreProvider#CachingReadStore => (r.inner, r.counters)
      case other => (other, new Counters)
    }
    val slot = prepare(version, uniqueId)
    new CachingStateStore(delegate.upgradeReadStoreToWriteStore(inner, version, uniqueId), slot, counters)
  }

  override def doMaintenance(): Unit = delegate.doMaintenance()

  // Spark asks an uninitialized instance (on the driver) which metrics its stores report.
  private def delegateOrBlank: StateStoreProvider =
    if (delegate != null) delegate else StateStoreProvider.create(delegateClassName(currentDelegate()))

  override def supportedCustomMetrics: Seq[StateStoreCustomMetric] =
    delegateOrBlank.supportedCustomMetrics ++ CacheMetrics

  override def supportedInstanceMetrics: Seq[StateStoreInstanceMetric] =
    delegateOrBlank.supportedInstanceMetrics

  override def toString: String = s"CachingStateStoreProvider[$delegate]"

  // Capacity of the store being opened (read once per store: it depends on the task's conf).
  @volatile private var storeCapacity = 0L

  /**
   * Takes the task's slot cache and keeps this store's rows in it only when they are still valid:
   * the requested version is the one this instance committed last, in that same slot cache.
   */
  private def prepare(version: Long, ckptId: Option[String]): RecordCache = {
    val slot = SlotCaches.forTask(synchronized(home))
    synchronized {
      storeCapacity = if (slot.pooled) capacity() else 0L
      if (home != null && (home ne slot)) home.dropOwner(this)
      home = slot
      val sameCkpt = ckptId.isEmpty || cachedCkptId.isEmpty || ckptId == cachedCkptId
      if (version != cachedVersion || !sameCkpt) {
        slot.dropOwner(this)
        cachedVersion = version
        cachedCkptId = ckptId
      }
      slot
    }
  }

  private def invalidate(): Unit = synchronized {
    if (home != null) home.dropOwner(this)
    cachedVersion = -1L
    cachedCkptId = None
  }

  private def committed(version: Long, ckptId: Option[String]): Unit = synchronized {
    cachedVersion = version
    cachedCkptId = ckptId
  }

  private def isCached(colFamily: String): Boolean = singleValueFamilies.contains(colFamily)

  /** Reads through the slot cache; shared by the read-only and the writable store. */
  private def cachedGet(inner: ReadStateStore, cache: RecordCache, counters: Counters, key: UnsafeRow,
      colFamily: String, writer: DirtyWriter): UnsafeRow = {
    if (!isCached(colFamily)) {
      counters.delegateReads += 1
      return inner.get(key, colFamily)
    }
    cache.get(CacheKey(colFamily, key, this)) match {
      case Some(entry) =>
        counters.hits += 1
        entry.value
      case None =>
        counters.misses += 1
        counters.delegateReads += 1
        val value = inner.get(key, colFamily)
        // Only rows that exist are cached (as Kafka does); the delegate may reuse its row.
        if (value != null) {
          val copy = value.copy()
          counters.evictions += cache.putClean(CacheKey(colFamily, key.copy(), this), copy, storeCapacity, writer)
          copy
        } else null
    }
  }

  private final class CachingReadStore(val inner: ReadStateStore, cache: RecordCache) extends ReadStateStore {
    val counters = new Counters // carried into the write store when upgraded
    // Clean entries only: a read store never holds a dirty entry, so nothing is ever written.
    private val noWrites: DirtyWriter = (k, _) =>
      throw new IllegalStateException(s"read-only store asked to write $k")

    override def id: StateStoreId = inner.id
    override def version: Long = inner.version
    override def get(key: UnsafeRow, colFamilyName: String): UnsafeRow =
      cachedGet(inner, cache, counters, key, colFamilyName, noWrites)
    override def valuesIterator(key: UnsafeRow, colFamilyName: String): Iterator[UnsafeRow] =
      inner.valuesIterator(key, colFamilyName)
    override def prefixScan(prefixKey: UnsafeRow, colFamilyName: String)
        : StateStoreIterator[UnsafeRowPair] = inner.prefixScan(prefixKey, colFamilyName)
    override def iterator(colFamilyName: String): StateStoreIterator[UnsafeRowPair] =
      inner.iterator(colFamilyName)
    override def abort(): Unit = inner.abort()
    override def release(): Unit = inner.release()
  }

  private final class CachingStateStore(inner: StateStore, cache: RecordCache, counters: Counters)
      extends StateStore with DirtyWriter {
    private val owner = CachingStateStoreProvider.this
    cache.attach(owner, this) // takes this store's dirty rows if another store's insert evicts them

    override def write(key: CacheKey, value: UnsafeRow): Unit = {
      if (key.owner ne owner) throw new IllegalStateException(
        s"sluice record cache: a pending write of ${key.owner} reached $this; failing the task rather than " +
          "writing it to another store")
      counters.delegateWrites += 1
      if (value == null) inner.remove(key.key, key.colFamily) else inner.put(key.key, value, key.colFamily)
    }

    // The task ended with this store still open: Spark aborts it; its rows must not outlive it.
    override def discarded(): Unit = invalidate()

    override def id: StateStoreId = inner.id
    override def version: Long = inner.version

    override def get(key: UnsafeRow, colFamilyName: String): UnsafeRow =
      cachedGet(inner, cache, counters, key, colFamilyName, this)

    private def putDirty(key: UnsafeRow, value: UnsafeRow, colFamilyName: String): Unit = {
      counters.evictions +=
        cache.putDirty(CacheKey(colFamilyName, key.copy(), owner), value, storeCapacity, this)
    }

    override def put(key: UnsafeRow, value: UnsafeRow, colFamilyName: String): Unit =
      if (isCached(colFamilyName)) putDirty(key, value.copy(), colFamilyName)
      else inner.put(key, value, colFamilyName)

    override def remove(key: UnsafeRow, colFamilyName: String): Unit =
      if (isCached(colFamilyName)) putDirty(key, null, colFamilyName)
      else inner.remove(key, colFamilyName)

    override def valuesIterator(key: UnsafeRow, colFamilyName: String): Iterator[UnsafeRow] =
      inner.valuesIterator(key, colFamilyName)
    override def putList(key: UnsafeRow, values: Array[UnsafeRow], colFamilyName: String): Unit =
      inner.putList(key, values, colFamilyName)
    override def merge(key: UnsafeRow, value: UnsafeRow, colFamilyName: String): Unit =
      inner.merge(key, value, colFamilyName)
    override def mergeList(key: UnsafeRow, values: Array[UnsafeRow], colFamilyName: String): Unit =
      inner.mergeList(key, values, colFamilyName)

    // Scans see the delegate alone, so every pending write goes there first.
    override def prefixScan(prefixKey: UnsafeRow, colFamilyName: String)
        : StateStoreIterator[UnsafeRowPair] = {
      flush()
      inner.prefixScan(prefixKey, colFamilyName)
    }

    override def iterator(colFamilyName: String): StateStoreIterator[UnsafeRowPair] = {
      flush()
      inner.iterator(colFamilyName)
    }

    override def createColFamilyIfAbsent(colFamilyName: String, keySchema: StructType,
        valueSchema: StructType, keyStateEncoderSpec: KeyStateEncoderSpec,
        useMultipleValuesPerKey: Boolean, isInternal: Boolean): Unit = {
      inner.createColFamilyIfAbsent(colFamilyName, keySchema, valueSchema, keyStateEncoderSpec,
        useMultipleValuesPerKey, isInternal)
      if (useMultipleValuesPerKey) {
        cache.dropColumnFamily(colFamilyName, owner)
        singleValueFamilies.remove(colFamilyName)
      } else singleValueFamilies.add(colFamilyName)
    }

    override def removeColFamilyIfExists(colFamilyName: String): Boolean = {
      cache.dropColumnFamily(colFamilyName, owner)
      singleValueFamilies.remove(colFamilyName)
      inner.removeColFamilyIfExists(colFamilyName)
    }

    private def flush(): Unit = if (cache.flush(this, owner)) counters.flushes += 1

    override def commit(): Long = {
      try {
        flush()
        val newVersion = inner.commit()
        committed(newVersion, inner.getStateStoreCheckpointInfo().stateStoreCkptId)
        marker.commitDone(delegateName)
        cache.detach(owner)
        counters.sizeBytes = cache.ownerBytes(owner)
        newVersion
      } catch {
        case NonFatal(e) => cache.detach(owner); invalidate(); throw e
      }
    }

    override def abort(): Unit = {
      cache.detach(owner)
      invalidate()
      inner.abort()
    }

    override def metrics: StateStoreMetrics = {
      val m = inner.metrics
      m.copy(customMetrics = m.customMetrics ++ counters.metrics)
    }

    override def getStateStoreCheckpointInfo(): StateStoreCheckpointInfo = inner.getStateStoreCheckpointInfo()
    override def hasCommitted: Boolean = inner.hasCommitted
    override def toString: String = s"CachingStateStore[$inner]"
  }
}

object CachingStateStoreProvider {
  val DelegateClasses: Map[String, String] = SluiceConf.ProviderClasses

  val CacheHits = StateStoreCustomSumMetric("cacheHits", "reads served by the sluice record cache")
  val CacheMisses = StateStoreCustomSumMetric("cacheMisses", "reads the sluice record cache passed to the delegate store")
  val CacheHitRatio: StateStoreCustomMetric = org.apache.spark.sql.sluice.AverageStoreMetric("cacheHitRatio",
    "percentage of reads served by the sluice record cache, averaged over the state stores")
  val CacheSizeBytes = StateStoreCustomSizeMetric("cacheSizeBytes", "bytes held by the sluice record cache")
  val CacheEvictions = StateStoreCustomSumMetric("cacheEvictions", "entries evicted from the sluice record cache")
  val CacheFlushes = StateStoreCustomSumMetric("cacheFlushes", "flushes of dirty entries into the delegate store")
  val DelegateWrites = StateStoreCustomSumMetric("delegateWrites", "puts and removes that reached the delegate store")
  val DelegateReads = StateStoreCustomSumMetric("delegateReads", "point reads that reached the delegate store")

  val CacheMetrics: Seq[StateStoreCustomMetric] = Seq(CacheHits, CacheMisses, CacheHitRatio,
    CacheSizeBytes, CacheEvictions, CacheFlushes, DelegateWrites, DelegateReads)

  /**
   * Bytes this task's record cache may hold: the slot's share of the executor budget (C/T), halved
   * when the query also runs emission caches (commit interval > 0), which take the other half.
   */
  private[cache] def capacity(): Long = {
    val key = SluiceConf.CommitIntervalMs.key
    val interval = Option(TaskContext.get()).flatMap(tc => Option(tc.getLocalProperty(key)))
      .orElse(Option(SparkEnv.get).flatMap(_.conf.getOption(key)))
      .flatMap(SluiceConf.parseMillis).getOrElse(0L)
    sharedSlotBytes(MemoryBudget.cacheBytesPerSlot, interval > 0)
  }

  /** One budget for both caches: each gets half of the slot's share when both are in use. */
  def sharedSlotBytes(slotBytes: Long, bothCaches: Boolean): Long = if (bothCaches) slotBytes / 2 else slotBytes

  /**
   * The delegate name: the running query's session conf (on the driver, or propagated to tasks as
   * local properties), else the SparkConf, else rocksdb.
   */
  private[cache] def currentDelegate(): String = {
    val key = SluiceConf.StateStoreCacheDelegate.key
    val fromTask = Option(TaskContext.get()).flatMap(tc => Option(tc.getLocalProperty(key)))
    val fromSession = if (TaskContext.get() == null) Option(SQLConf.get.getConfString(key, null)) else None
    val fromEnv = Option(SparkEnv.get).flatMap(_.conf.getOption(key))
    val settings = fromTask.orElse(fromSession).orElse(fromEnv).map(key -> _).toSeq
    SluiceConf(settings).get(SluiceConf.StateStoreCacheDelegate)
  }

  private[cache] def delegateClassName(name: String): String = {
    val cls = DelegateClasses(name)
    try { Class.forName(cls, false, Thread.currentThread().getContextClassLoader); cls }
    catch {
      case _: ClassNotFoundException => throw new SluiceConfException(
        s"${SluiceConf.StateStoreCacheDelegate.key}=$name needs class $cls, which is not on the class path")
    }
  }
}

/** What one store (one batch of one partition) did with the cache, reported as its metrics. */
private[cache] final class Counters {
  import CachingStateStoreProvider._
  var hits, misses, evictions, flushes, delegateWrites, delegateReads = 0L
  var sizeBytes = 0L // this store's rows in its slot cache, at commit

  def metrics: Map[StateStoreCustomMetric, Long] = {
    val ratio: Map[StateStoreCustomMetric, Long] =
      if (hits + misses == 0) Map.empty else Map(CacheHitRatio -> hits * 100 / (hits + misses))
    ratio ++ Map(
      CacheHits -> hits,
      CacheMisses -> misses,
      CacheSizeBytes -> sizeBytes,
      CacheEvictions -> evictions,
      CacheFlushes -> flushes,
      DelegateWrites -> delegateWrites,
      DelegateReads -> delegateReads)
  }
}
