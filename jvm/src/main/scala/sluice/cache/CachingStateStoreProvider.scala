package sluice.cache

import org.apache.hadoop.conf.Configuration
import org.apache.spark.TaskContext
import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.sluice.DelegatedReplay

import sluice.cache.internal.{
  CacheKey, CacheMetrics, CachingReadStore, CachingStateStore, ColumnFamilies,
  DelegateMarker, DirtyWriter, FineGrainedRefusal, RecordCache, SlotCaches, StoreCounters, WriteBehindLog,
  WriteBehindState
}
import sluice.conf.{ConfResolver, MemoryBudget, SluiceConf, SluiceConfException}
import sluice.windowstore.InMemoryWindowStoreProvider
import sluice.spark.StateStoreTypes._
import sluice.spark.{Maintenance, OpenOptions, ProviderBase, ProviderSpec, SparkSessionConf, SparkShim}

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
 *
 * This class is the provider's lifecycle: which version its cached rows and write-behind rows
 * describe. Its stores are [[CachingReadStore]] and [[CachingStateStore]]; the write-behind rows
 * are a [[WriteBehindState]]; what is known of the column families is [[ColumnFamilies]].
 */
class CachingStateStoreProvider extends ProviderBase with DelegatedReplay {
  import CachingStateStoreProvider._

  private var _delegate: StateStoreProvider = _
  private var delegateName: String = _
  private var marker: DelegateMarker = _
  private var _storeConf: StateStoreConf = _
  private var hadoopConf: Configuration = _
  // The slot cache holding this store's rows (null before the first store opens).
  private var home: RecordCache = _
  // The batch version (and its checkpoint id) the cache's rows and the write-behind rows belong to;
  // -1 when unknown.
  private var cachedVersion = -1L
  private var cachedCkptId: Option[String] = None
  private[cache] val writeBehind = new WriteBehindState(this)
  // The session's default delegate, when the store's own (recorded) one was taken instead.
  private var adoptedOver: Option[String] = None
  private[cache] val families = new ColumnFamilies

  override protected def setUp(spec: ProviderSpec): Unit = {
    val dir = spec.stateStoreId.storeCheckpointLocation()
    marker = new DelegateMarker(dir, spec.hadoopConf)
    // A session that names no delegate reads a store with the delegate that wrote it (Spark's state
    // data source with sluice's defaults); it may not write it (see refuseAdoptedWrite).
    val named = ConfResolver.getSet(SluiceConf.StateStoreCacheDelegate)
    val written = if (named.isEmpty) marker.written() else None
    val default = currentDelegate()
    val name = named.orElse(written).getOrElse(default)
    adoptedOver = if (written.exists(_ != default)) Some(default) else None
    marker.check(name) // before the delegate reads anything another kind of store wrote
    delegateName = name
    _storeConf = spec.storeConf
    hadoopConf = spec.hadoopConf
    writeBehind.open(new WriteBehindLog(dir, spec.hadoopConf))
    _delegate = StateStoreProvider.create(delegateClassName(name))
    spec.init(_delegate)
    families.learn(StateStore.DEFAULT_COL_FAMILY_NAME, spec.keyStateEncoderSpec, spec.useMultipleValuesPerKey)
  }

  private[cache] def delegate: StateStoreProvider = _delegate
  private[cache] def storeConf: StateStoreConf = _storeConf
  private[cache] def hadoopConfiguration: Configuration = hadoopConf

  override def stateStoreId: StateStoreId = delegate.stateStoreId

  override def close(): Unit = {
    invalidate()
    if (delegate != null) delegate.close() // null: never initialized, or init failed before creating it
  }

  /**
   * A store opened for writing keeps the session's delegate: the driver sizes the operator's metrics
   * by the session's delegate (see supportedCustomMetrics), so a query writing with another one would
   * report metrics the driver does not know. It is refused as before the adoption.
   */
  private def refuseAdoptedWrite(): Unit = adoptedOver.foreach(d => throw marker.refusal(d, delegateName))

  override protected def openStore(version: Long, ckptId: Option[String], options: OpenOptions): StateStore = {
    refuseAdoptedWrite()
    if (options.loadEmpty) return openEmpty(version, ckptId, options)
    val (slot, wb, d) = prepare(version, ckptId)
    if (wb && !options.forceSnapshotOnCommit) {
      new CachingStateStore(this, version, delegate.getReadStore(d, None), null, slot, new StoreCounters, options)
    } else {
      val w = SparkShim.openStore(delegate, d, if (d == version) ckptId else None, options)
      new CachingStateStore(this, version, w, w, slot, new StoreCounters, options)
    }
  }

  override def getReadStore(version: Long, uniqueId: Option[String]): ReadStateStore = {
    val (slot, _, d) = prepare(version, uniqueId)
    new CachingReadStore(this, version, delegate.getReadStore(d, if (d == version) uniqueId else None), slot)
  }

  override protected def upgradeStore(readStore: ReadStateStore, version: Long, uniqueId: Option[String],
      options: OpenOptions): StateStore = {
    refuseAdoptedWrite()
    readStore match {
      case r: CachingReadStore if r.version == version && !options.loadEmpty =>
        val (slot, wb, d) = prepare(version, uniqueId)
        if (wb && !options.forceSnapshotOnCommit) {
          new CachingStateStore(this, version, r.inner, null, slot, r.counters, options)
        } else {
          val w = SparkShim.upgradeStore(delegate, r.inner, d, if (d == version) uniqueId else None, options)
          new CachingStateStore(this, version, w, w, slot, r.counters, options)
        }
      case _ => openStore(version, uniqueId, options)
    }
  }

  /**
   * An empty store at `version` (spark-4.2 and later: Spark rewriting state, e.g. repartitioning): nothing cached
   * or logged for this provider describes it, and the delegate starts it empty at the same version.
   */
  private def openEmpty(version: Long, ckptId: Option[String], options: OpenOptions): StateStore = {
    invalidate()
    val slot = SlotCaches.forTask(synchronized(home))
    synchronized {
      if (home != null && (home ne slot)) home.dropOwner(this)
      home = slot
      writeBehind.startEmpty(version)
      cachedVersion = version
      cachedCkptId = ckptId
    }
    val w = SparkShim.openStore(delegate, version, ckptId, options)
    new CachingStateStore(this, version, w, w, slot, new StoreCounters, options)
  }

  // Spark's state data source with `readChangeFeed` or `snapshotStartBatchId`: the delegate's own
  // versions are the store's as long as write-behind never ran here (each batch committed to the
  // delegate as itself). Once it has, the delegate skipped the batches whose rows were logged and
  // holds several batches' changes in one version, so the feed would not be per batch: refused.

  override protected def replayedBy(option: String, readOnly: Boolean): SupportsFineGrainedReplay = {
    if (!readOnly) { refuseAdoptedWrite(); invalidate() } // the delegate's store is written around the cache
    val wb = writeBehind.log.dir
    if (wb.getFileSystem(hadoopConf).exists(wb)) {
      throw new UnsupportedOperationException(FineGrainedRefusal.writeBehind(option, wb.toString))
    }
    delegate match {
      case d: SupportsFineGrainedReplay => d
      case d => throw new UnsupportedOperationException(FineGrainedRefusal.delegate(option, d.getClass.getName))
    }
  }

  /** The delegate cleans its own versions; write-behind files no retained batch version needs go. */
  override protected[sluice] def maintain(work: Maintenance): Unit = {
    SparkShim.maintain(delegate, work)
    if (work.cleanup && writeBehind.log != null) writeBehind.deleteUnneeded(storeConf.minVersionsToRetain)
  }

  // Spark asks an uninitialized instance (on the driver) which metrics its stores report.
  private def delegateOrBlank: StateStoreProvider =
    if (delegate != null) delegate else StateStoreProvider.create(delegateClassName(currentDelegate()))

  override def supportedCustomMetrics: Seq[StateStoreCustomMetric] =
    delegateOrBlank.supportedCustomMetrics ++ CacheMetrics.All

  override def supportedInstanceMetrics: Seq[StateStoreInstanceMetric] =
    delegateOrBlank.supportedInstanceMetrics

  override def toString: String = s"CachingStateStoreProvider[$delegate]"

  // Capacity of the store being opened (read once per store: it depends on the task's conf), its
  // slot share, and the commit interval of the query that opened it (0: the delegate commits every batch).
  @volatile private var _storeCapacity = 0L
  @volatile private var _storeShare = 0L
  @volatile private var _intervalMs = 0L
  private[cache] def storeCapacity: Long = _storeCapacity
  private[cache] def storeShare: Long = _storeShare
  private[cache] def intervalMs: Long = _intervalMs

  /**
   * Takes the task's slot cache and keeps this store's rows in it only when they are still valid:
   * the requested version is the one this instance committed last. Otherwise the version is
   * loaded: its write-behind file gives the delegate version and the rows changed since (no file:
   * the delegate's version of the same number). Returns the slot, whether the delegate commits only
   * when the interval is due (write-behind), and the delegate version to open.
   */
  private def prepare(version: Long, ckptId: Option[String]): (RecordCache, Boolean, Long) = {
    val slot = SlotCaches.forTask(synchronized(home))
    val interval = if (TaskContext.get() == null) 0L else commitInterval()
    val wb = interval > 0 && writeBehindApplies(delegateName)
    // SluicePlugin refuses this at session start; a query can still set the format in its session.
    checkpointFormatRefusal(interval, delegateName, storeConf.stateStoreCheckpointFormatVersion)
      .foreach(m => throw new SluiceConfException(m))
    synchronized {
      _intervalMs = interval
      _storeShare = if (slot.pooled) MemoryBudget.recordCacheBytes(interval) else 0L
      if (home != null && (home ne slot)) home.dropOwner(this)
      home = slot
      val sameCkpt = ckptId.isEmpty || cachedCkptId.isEmpty || ckptId == cachedCkptId
      // -1 is also "no cached version": a negative version always goes to the delegate, which refuses it.
      if (version < 0 || version != cachedVersion || !sameCkpt) {
        slot.dropOwner(this)
        writeBehind.reset()
        cachedVersion = -1L
        val logged = writeBehind.load(version)
        if (logged && storeConf.enableStateStoreCheckpointIds) throw new SluiceConfException(
          s"the state in ${writeBehind.log.dir.getParent} was written by sluice's write-behind cache, which needs " +
            s"$FormatKey=1, got ${storeConf.stateStoreCheckpointFormatVersion}: set $FormatKey=1 (or unset it)")
        cachedVersion = version
        cachedCkptId = ckptId
        if (writeBehind.lastDelegateCommitMs == 0L) writeBehind.lastDelegateCommitMs = System.currentTimeMillis()
      }
      // Rows held only by the write-behind log count against the store's share of the slot.
      _storeCapacity = math.max(0L, _storeShare - writeBehind.bytes)
      (slot, wb, writeBehind.delegateVersion)
    }
  }

  /** Drops every row this provider holds: they describe no version any more. */
  private[cache] def invalidate(): Unit = synchronized {
    if (home != null) home.dropOwner(this)
    writeBehind.reset()
    cachedVersion = -1L
    cachedCkptId = None
  }

  /** A store committed batch version `version` on delegate version `d`: the cached rows describe it. */
  private[cache] def committed(version: Long, ckptId: Option[String], d: Long): Unit = {
    synchronized {
      cachedVersion = version
      cachedCkptId = ckptId
      writeBehind.buildOn(d)
    }
    marker.commitDone(delegateName)
  }

  /** Reads through the slot cache, then the write-behind rows; shared by the read-only and the writable store. */
  private[cache] def cachedGet(inner: ReadStateStore, cache: RecordCache, counters: StoreCounters, key: UnsafeRow,
      colFamily: String, writer: DirtyWriter): UnsafeRow = {
    if (!families.isCached(colFamily)) {
      counters.delegateReads += 1
      return inner.get(key, colFamily)
    }
    cache.get(CacheKey(colFamily, key, this)) match {
      case Some(entry) =>
        counters.hits += 1
        entry.value
      case None =>
        counters.misses += 1
        val value = writeBehind.logged(CacheKey(colFamily, key, this)).getOrElse {
          counters.delegateReads += 1
          inner.get(key, colFamily)
        }
        // Only rows that exist are cached (as Kafka does); the delegate may reuse its row.
        if (value != null) {
          val copy = value.copy()
          counters.evictions += cache.putClean(CacheKey(colFamily, key.copy(), this), copy, storeCapacity, writer)
          copy
        } else null
    }
  }
}

object CachingStateStoreProvider {
  val DelegateClasses: Map[String, String] = SluiceConf.ProviderClasses

  /** The running query's commit interval. */
  private[cache] def commitInterval(): Long = ConfResolver.get(SluiceConf.CommitIntervalMs)

  /**
   * The delegates whose commits wait for the interval. The window store expires segments when it
   * loads a version, so a row held back from it could outlive its expiry; it commits every batch
   * (its commits are in-memory deltas, the cost write-behind saves elsewhere).
   */
  private[cache] def writeBehindApplies(delegate: String): Boolean = delegate != WindowStoreDelegate

  private val WindowStoreDelegate = "in_memory_window"
  // Spark's HDFS-backed store refuses checkpoint format 2 itself, as the window store does.
  private val DelegatesWithCheckpointIds = Set("rocksdb")
  private val FormatKey = SparkSessionConf.CheckpointFormatKey

  /**
   * Why the record cache cannot run under state store checkpoint format `formatVersion`, or None.
   * The write-behind cache (interval > 0) numbers its delegate's versions itself, which the store
   * checkpoint ids of format 2 cannot follow; the window store delegate refuses format 2 at any
   * interval. The one text for the store when it opens and for SluicePlugin's check of the
   * session's conf at start.
   */
  def checkpointFormatRefusal(intervalMs: Long, delegate: String, formatVersion: Int): Option[String] =
    if (delegate == WindowStoreDelegate) InMemoryWindowStoreProvider.checkpointFormatRefusal(formatVersion)
    else if (intervalMs <= 0 || formatVersion <= 1) None
    else {
      val interval = SluiceConf.CommitIntervalMs.key
      Some(s"$interval=$intervalMs with ${SparkSessionConf.ProviderClassKey}=${SluiceConf.CachingProviderClass} " +
        s"needs $FormatKey=1, got $formatVersion: the write-behind cache numbers its delegate's versions itself, " +
        s"which the store checkpoint ids of format $formatVersion cannot follow. Set $FormatKey=1 (or unset it)" +
        (if (DelegatesWithCheckpointIds(delegate)) s", or $interval=0" else ""))
    }

  /** The delegate name of the running query (or, on the driver, of the active session). */
  private[cache] def currentDelegate(): String = ConfResolver.get(SluiceConf.StateStoreCacheDelegate)

  private[cache] def delegateClassName(name: String): String = {
    val cls = DelegateClasses(name)
    try { Class.forName(cls, false, Thread.currentThread().getContextClassLoader); cls }
    catch {
      case _: ClassNotFoundException => throw new SluiceConfException(
          s"${SluiceConf.StateStoreCacheDelegate.key}=$name needs class $cls, which is not on the class path")
    }
  }
}
