package sluice.cache

import java.util.Collections
import java.util.WeakHashMap

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration
import org.apache.spark.{SparkEnv, TaskContext}
import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types.StructType

import sluice.conf.{SluiceConf, SluiceConfException}
import sluice.plugin.MemoryBudget

/**
 * A [[StateStoreProvider]] that puts Kafka Streams' record cache (KIP-63) in front of another
 * provider, chosen by `spark.sluice.statestore.cache.delegate`.
 *
 * Design (why it is correct):
 *  - Point operations (get/put/remove) on single-value column families go through a byte-bounded
 *    LRU [[RecordCache]] owned by this provider instance. Writes are dirty entries, coalesced per
 *    key, written to the delegate when evicted or just before the delegate's commit.
 *  - Scans (iterator, prefixScan, range scans through prefixScan/iterator on range encoders) first
 *    flush every dirty entry into the delegate and then read the delegate alone, so they see exactly
 *    what the delegate would without the cache. Flushing keeps the design simple; it costs coalescing
 *    only for operators that scan in the same batch they write (e.g. watermark eviction).
 *  - Multi-value column families (list state: merge/valuesIterator) are passed through uncached.
 *  - Cached rows describe one version: they stay valid only while this instance continues from the
 *    version (and checkpoint id) it committed itself. Loading any other version, aborting, or a
 *    failed commit clears the cache, so a reload, a replayed batch or a restart never reads a stale
 *    row.
 */
class CachingStateStoreProvider extends StateStoreProvider {
  import CachingStateStoreProvider._

  private var delegate: StateStoreProvider = _
  private[cache] val cache = new RecordCache
  // The version (and its checkpoint id) the cache's rows belong to; -1 when empty/unknown.
  private var cachedVersion = -1L
  private var cachedCkptId: Option[String] = None
  // Column families known to hold one value per key: only those are cached.
  private val singleValueFamilies = Collections.synchronizedSet(new java.util.HashSet[String]())

  def delegateProvider: StateStoreProvider = delegate

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
    delegate = StateStoreProvider.create(delegateClassName(currentDelegate()))
    delegate.init(stateStoreId, keySchema, valueSchema, keyStateEncoderSpec, useColumnFamilies,
      storeConfs, hadoopConf, useMultipleValuesPerKey, stateSchemaProvider)
    if (!useMultipleValuesPerKey) singleValueFamilies.add(StateStore.DEFAULT_COL_FAMILY_NAME)
    RecordCaches.register(this)
  }

  override def stateStoreId: StateStoreId = delegate.stateStoreId

  override def close(): Unit = {
    RecordCaches.unregister(this)
    cache.clear()
    delegate.close()
  }

  override def getStore(version: Long, stateStoreCkptId: Option[String]): StateStore = {
    prepare(version, stateStoreCkptId)
    new CachingStateStore(delegate.getStore(version, stateStoreCkptId), new Counters(cache))
  }

  override def getReadStore(version: Long, uniqueId: Option[String]): ReadStateStore = {
    prepare(version, uniqueId)
    new CachingReadStore(delegate.getReadStore(version, uniqueId))
  }

  override def upgradeReadStoreToWriteStore(
      readStore: ReadStateStore, version: Long, uniqueId: Option[String]): StateStore = {
    val (inner, counters) = readStore match {
      case r: CachingStateStoreProvider#CachingReadStore => (r.inner, r.counters)
      case other => (other, new Counters(cache))
    }
    prepare(version, uniqueId)
    new CachingStateStore(delegate.upgradeReadStoreToWriteStore(inner, version, uniqueId), counters)
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

  /** Keeps the cache only when the requested version is the one this instance committed last. */
  private def prepare(version: Long, ckptId: Option[String]): Unit = synchronized {
    storeCapacity = capacity()
    val sameCkpt = ckptId.isEmpty || cachedCkptId.isEmpty || ckptId == cachedCkptId
    if (version != cachedVersion || !sameCkpt) {
      cache.clear()
      cachedVersion = version
      cachedCkptId = ckptId
    }
  }

  private def invalidate(): Unit = synchronized {
    cache.clear()
    cachedVersion = -1L
    cachedCkptId = None
  }

  private def committed(version: Long, ckptId: Option[String]): Unit = synchronized {
    cachedVersion = version
    cachedCkptId = ckptId
  }

  private def isCached(colFamily: String): Boolean = singleValueFamilies.contains(colFamily)

  /** Reads through the cache; shared by the read-only and the writable store. */
  private def cachedGet(inner: ReadStateStore, key: UnsafeRow, colFamily: String,
      writer: DirtyWriter): UnsafeRow = {
    if (!isCached(colFamily)) {
      cache.delegateReads += 1
      return inner.get(key, colFamily)
    }
    val ck = CacheKey(colFamily, key)
    cache.get(ck) match {
      case Some(entry) => entry.value
      case None =>
        cache.delegateReads += 1
        val value = inner.get(key, colFamily)
        // Only rows that exist are cached (as Kafka does); the delegate may reuse its row.
        if (value != null) {
          val copy = value.copy()
          cache.putClean(CacheKey(colFamily, key.copy()), copy, storeCapacity, writer)
          copy
        } else null
    }
  }

  private final class CachingReadStore(val inner: ReadStateStore) extends ReadStateStore {
    val counters = new Counters(cache) // carried into the write store when upgraded
    // Clean entries only: a read store never holds a dirty entry, so nothing is ever written.
    private val noWrites: DirtyWriter = (k, _) =>
      throw new IllegalStateException(s"read-only store asked to write $k")

    override def id: StateStoreId = inner.id
    override def version: Long = inner.version
    override def get(key: UnsafeRow, colFamilyName: String): UnsafeRow =
      cachedGet(inner, key, colFamilyName, noWrites)
    override def valuesIterator(key: UnsafeRow, colFamilyName: String): Iterator[UnsafeRow] =
      inner.valuesIterator(key, colFamilyName)
    override def prefixScan(prefixKey: UnsafeRow, colFamilyName: String)
        : StateStoreIterator[UnsafeRowPair] = inner.prefixScan(prefixKey, colFamilyName)
    override def iterator(colFamilyName: String): StateStoreIterator[UnsafeRowPair] =
      inner.iterator(colFamilyName)
    override def abort(): Unit = inner.abort()
    override def release(): Unit = inner.release()
  }

  private final class CachingStateStore(inner: StateStore, counters: Counters)
      extends StateStore with DirtyWriter {

    override def write(key: CacheKey, value: UnsafeRow): Unit =
      if (value == null) inner.remove(key.key, key.colFamily) else inner.put(key.key, value, key.colFamily)

    override def id: StateStoreId = inner.id
    override def version: Long = inner.version

    override def get(key: UnsafeRow, colFamilyName: String): UnsafeRow =
      cachedGet(inner, key, colFamilyName, this)

    override def put(key: UnsafeRow, value: UnsafeRow, colFamilyName: String): Unit =
      if (isCached(colFamilyName)) {
        cache.putDirty(CacheKey(colFamilyName, key.copy()), value.copy(), storeCapacity, this)
      } else inner.put(key, value, colFamilyName)

    override def remove(key: UnsafeRow, colFamilyName: String): Unit =
      if (isCached(colFamilyName)) {
        cache.putDirty(CacheKey(colFamilyName, key.copy()), null, storeCapacity, this)
      } else inner.remove(key, colFamilyName)

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
      cache.flush(this)
      inner.prefixScan(prefixKey, colFamilyName)
    }

    override def iterator(colFamilyName: String): StateStoreIterator[UnsafeRowPair] = {
      cache.flush(this)
      inner.iterator(colFamilyName)
    }

    override def createColFamilyIfAbsent(colFamilyName: String, keySchema: StructType,
        valueSchema: StructType, keyStateEncoderSpec: KeyStateEncoderSpec,
        useMultipleValuesPerKey: Boolean, isInternal: Boolean): Unit = {
      inner.createColFamilyIfAbsent(colFamilyName, keySchema, valueSchema, keyStateEncoderSpec,
        useMultipleValuesPerKey, isInternal)
      if (useMultipleValuesPerKey) {
        cache.dropColumnFamily(colFamilyName)
        singleValueFamilies.remove(colFamilyName)
      } else singleValueFamilies.add(colFamilyName)
    }

    override def removeColFamilyIfExists(colFamilyName: String): Boolean = {
      cache.dropColumnFamily(colFamilyName)
      singleValueFamilies.remove(colFamilyName)
      inner.removeColFamilyIfExists(colFamilyName)
    }

    override def commit(): Long = {
      try {
        cache.flush(this)
        val newVersion = inner.commit()
        committed(newVersion, inner.getStateStoreCheckpointInfo().stateStoreCkptId)
        RecordCaches.trim(CachingStateStoreProvider.this)
        newVersion
      } catch {
        case NonFatal(e) => invalidate(); throw e
      }
    }

    override def abort(): Unit = {
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
  val DelegateClasses: Map[String, String] = Map(
    "rocksdb" -> "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "hdfs" -> "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "in_memory_window" -> "sluice.windowstore.InMemoryWindowStoreProvider")

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

/** Counters at store open; a store reports what happened since (one batch of one partition). */
private[cache] final class Counters(cache: RecordCache) {
  import CachingStateStoreProvider._
  private val h0 = cache.hits
  private val m0 = cache.misses
  private val e0 = cache.evictions
  private val f0 = cache.flushes
  private val w0 = cache.delegateWrites
  private val r0 = cache.delegateReads

  def metrics: Map[StateStoreCustomMetric, Long] = {
    val hits = cache.hits - h0
    val misses = cache.misses - m0
    val ratio: Map[StateStoreCustomMetric, Long] =
      if (hits + misses == 0) Map.empty else Map(CacheHitRatio -> hits * 100 / (hits + misses))
    ratio ++ Map(
      CacheHits -> hits,
      CacheMisses -> misses,
      CacheSizeBytes -> cache.sizeBytes,
      CacheEvictions -> (cache.evictions - e0),
      CacheFlushes -> (cache.flushes - f0),
      DelegateWrites -> (cache.delegateWrites - w0),
      DelegateReads -> (cache.delegateReads - r0))
  }
}

/**
 * All record caches of this executor. Each cache is bounded by its slot's share while its store
 * is open; between batches a cache holds only clean rows, and those of idle providers are dropped
 * (least recently committed first) whenever the executor's caches together exceed the executor's
 * budget C, so the total stays bounded by C plus the dirty rows of stores open right now.
 */
private[cache] object RecordCaches {
  // provider -> last commit time, weakly held so unloaded providers disappear
  private val providers = new WeakHashMap[CachingStateStoreProvider, java.lang.Long]()

  def register(p: CachingStateStoreProvider): Unit = synchronized { providers.put(p, System.nanoTime()) }
  def unregister(p: CachingStateStoreProvider): Unit = synchronized { providers.remove(p) }

  def trim(justCommitted: CachingStateStoreProvider): Unit = {
    val byAge = synchronized {
      providers.put(justCommitted, System.nanoTime())
      providers.asScala.toSeq.sortBy(_._2.longValue()).map(_._1)
    }
    val budget = MemoryBudget.current.cacheMaxBytes
    var total = byAge.map(_.cache.sizeBytes).sum
    val it = byAge.iterator
    while (total > budget && it.hasNext) {
      val c = it.next().cache
      val before = c.sizeBytes
      c.dropClean(math.max(0L, before - (total - budget)))
      total -= before - c.sizeBytes
    }
  }
}
