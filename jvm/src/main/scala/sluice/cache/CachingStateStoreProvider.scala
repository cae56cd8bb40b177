package sluice.cache

import java.util.Collections

import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration
import org.apache.spark.TaskContext
import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.types.StructType

import sluice.cache.internal.{CacheKey, CacheMetrics, DelegateMarker, DirtyWriter, LoggedRow, RecordCache, SlotCaches,
  StoreCounters, WriteBehindEntry, WriteBehindLog}
import sluice.conf.{ConfResolver, MemoryBudget, SluiceConf, SluiceConfException}
import sluice.windowstore.InMemoryWindowStoreProvider
import sluice.spark.StateStoreTypes._
import sluice.spark.{ForwardingReadStore, ForwardingStore, Maintenance, OpenOptions, ProviderBase, SessionConf, SparkShim}

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
class CachingStateStoreProvider extends ProviderBase {
  import CachingStateStoreProvider._

  private var delegate: StateStoreProvider = _
  private var delegateName: String = _
  private var marker: DelegateMarker = _
  private var log: WriteBehindLog = _
  private var storeConf: StateStoreConf = _
  private var hadoopConfiguration: Configuration = _
  // The slot cache holding this store's rows (null before the first store opens).
  private var home: RecordCache = _
  // The batch version (and its checkpoint id) the cache's rows and `pending` belong to; -1 when unknown.
  private var cachedVersion = -1L
  private var cachedCkptId: Option[String] = None
  // Write-behind state of `cachedVersion`: the delegate version it builds on and every row changed
  // since (value null: removed), in the order they were first changed. Provider-level, not in the
  // slot cache, so another store's inserts can never evict a row only this holds.
  private var delegateVersion = -1L
  private val pending = new java.util.LinkedHashMap[CacheKey, UnsafeRow]()
  private var pendingBytes = 0L
  // Spark's state row count must not depend on when the delegate commits: the delegate's key count
  // at `delegateVersion` (-1: not known yet) and, per key of `pending`, whether the delegate has it
  // there. So a batch that only logs its rows reports the count the delegate would after them.
  private var delegateKeys = -1L
  private val inDelegate = new java.util.HashMap[CacheKey, java.lang.Boolean]()
  // Wall clock of the delegate's last commit: it only decides *when* the delegate commits, never
  // what a batch reads or emits (the logical state after each batch is the same either way).
  private var lastDelegateCommitMs = 0L
  // Column families known to hold one value per key: only those are cached.
  private val singleValueFamilies = Collections.synchronizedSet(new java.util.HashSet[String]())
  // Key encoders by column family: iterators merge logged rows only where no order is promised.
  private val encoders = new java.util.concurrent.ConcurrentHashMap[String, KeyStateEncoderSpec]()

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
    storeConf = storeConfs
    hadoopConfiguration = hadoopConf
    log = new WriteBehindLog(stateStoreId.storeCheckpointLocation(), hadoopConf)
    delegate = StateStoreProvider.create(delegateClassName(name))
    delegate.init(stateStoreId, keySchema, valueSchema, keyStateEncoderSpec, useColumnFamilies,
      storeConfs, hadoopConf, useMultipleValuesPerKey, stateSchemaProvider)
    encoders.put(StateStore.DEFAULT_COL_FAMILY_NAME, keyStateEncoderSpec)
    if (!useMultipleValuesPerKey) singleValueFamilies.add(StateStore.DEFAULT_COL_FAMILY_NAME)
  }

  override def stateStoreId: StateStoreId = delegate.stateStoreId

  override def close(): Unit = {
    invalidate()
    if (delegate != null) delegate.close() // null: never initialized, or init failed before creating it
  }

  override protected def openStore(version: Long, ckptId: Option[String], options: OpenOptions): StateStore = {
    if (options.loadEmpty) return openEmpty(version, ckptId, options)
    val (slot, wb, d) = prepare(version, ckptId)
    if (wb && !options.forceSnapshotOnCommit) {
      new CachingStateStore(version, delegate.getReadStore(d, None), null, slot, new StoreCounters, options)
    } else {
      val w = SparkShim.openStore(delegate, d, if (d == version) ckptId else None, options)
      new CachingStateStore(version, w, w, slot, new StoreCounters, options)
    }
  }

  override def getReadStore(version: Long, uniqueId: Option[String]): ReadStateStore = {
    val (slot, _, d) = prepare(version, uniqueId)
    new CachingReadStore(version, delegate.getReadStore(d, if (d == version) uniqueId else None), slot)
  }

  override protected def upgradeStore(readStore: ReadStateStore, version: Long, uniqueId: Option[String],
      options: OpenOptions): StateStore = {
    readStore match {
      case r: CachingStateStoreProvider#CachingReadStore if r.version == version && !options.loadEmpty =>
        val (slot, wb, d) = prepare(version, uniqueId)
        if (wb && !options.forceSnapshotOnCommit) new CachingStateStore(version, r.inner, null, slot, r.counters, options)
        else {
          val w = SparkShim.upgradeStore(delegate, r.inner, d, if (d == version) uniqueId else None, options)
          new CachingStateStore(version, w, w, slot, r.counters, options)
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
      log.clear(version)
      cachedVersion = version
      cachedCkptId = ckptId
      delegateVersion = version
    }
    val w = SparkShim.openStore(delegate, version, ckptId, options)
    new CachingStateStore(version, w, w, slot, new StoreCounters, options)
  }

  /** The delegate cleans its own versions; write-behind files no retained batch version needs go. */
  override protected[sluice] def maintain(work: Maintenance): Unit = {
    SparkShim.maintain(delegate, work)
    if (work.cleanup && log != null) {
      val versions = log.versions()
      if (versions.nonEmpty) log.deleteBelow(versions.last - storeConf.minVersionsToRetain)
    }
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
  @volatile private var storeCapacity = 0L
  @volatile private var storeShare = 0L
  @volatile private var intervalMs = 0L

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
      intervalMs = interval
      storeShare = if (slot.pooled) MemoryBudget.recordCacheBytes(interval) else 0L
      if (home != null && (home ne slot)) home.dropOwner(this)
      home = slot
      val sameCkpt = ckptId.isEmpty || cachedCkptId.isEmpty || ckptId == cachedCkptId
      // -1 is also "no cached version": a negative version always goes to the delegate, which refuses it.
      if (version < 0 || version != cachedVersion || !sameCkpt) {
        slot.dropOwner(this)
        clearPending()
        delegateKeys = -1L
        cachedVersion = -1L
        val entry = log.read(version)
        delegateVersion = entry.map(_.delegateVersion).getOrElse(version)
        entry.foreach(_.rows.foreach(r => addPending(CacheKey(r.colFamily, r.key, this), r.value)))
        if (entry.isDefined && storeConf.enableStateStoreCheckpointIds) throw new SluiceConfException(
          s"the state in ${log.dir.getParent} was written by sluice's write-behind cache, which needs " +
            s"$FormatKey=1, got ${storeConf.stateStoreCheckpointFormatVersion}: set $FormatKey=1 (or unset it)")
        cachedVersion = version
        cachedCkptId = ckptId
        if (lastDelegateCommitMs == 0L) lastDelegateCommitMs = System.currentTimeMillis()
      }
      // Rows held only by the write-behind log count against the store's share of the slot.
      storeCapacity = math.max(0L, storeShare - pendingBytes)
      (slot, wb, delegateVersion)
    }
  }

  private def clearPending(): Unit = { pending.clear(); pendingBytes = 0L; inDelegate.clear() }

  /**
   * The number of keys after this batch while its rows are only logged: the delegate's count at
   * `delegateVersion` plus, per logged key, whether it exists now minus whether it did there.
   * `reader` is the delegate's store at `delegateVersion`, still open; this releases it (a RocksDB
   * store reports its count only once released).
   */
  private def keysWithLogAndRelease(reader: ReadStateStore): Long = {
    val rows = synchronized {
      val b = Seq.newBuilder[(CacheKey, Boolean, java.lang.Boolean)]
      pending.forEach((k, v) => b += ((k, v != null, inDelegate.get(k))))
      b.result()
    }
    val delta = rows.map { case (k, exists, known) =>
      val before = if (known != null) known.booleanValue() else {
        val b = reader.get(k.key, k.colFamily) != null
        synchronized { if (pending.containsKey(k)) inDelegate.put(k, b) }
        b
      }
      (if (exists) 1L else 0L) - (if (before) 1L else 0L)
    }.sum
    val known = synchronized(delegateKeys)
    val base = if (known >= 0) { reader.release(); known } else reader match {
      case s: StateStore => reader.release(); s.metrics.numKeys
      case r => // a read-only store without metrics (HDFS-backed): count it, once per loaded version
        val n = try { val it = r.iterator(StateStore.DEFAULT_COL_FAMILY_NAME); try it.size.toLong finally it.close() }
          finally r.release()
        n
    }
    synchronized { delegateKeys = base }
    base + delta
  }

  private def addPending(key: CacheKey, value: UnsafeRow): Unit = {
    if (pending.containsKey(key)) { // re-inserted last: the log keeps the order rows were last changed
      pendingBytes -= RecordCache.entrySize(key, pending.remove(key))
    }
    pending.put(key, value)
    pendingBytes += RecordCache.entrySize(key, value)
  }

  private def invalidate(): Unit = synchronized {
    if (home != null) home.dropOwner(this)
    clearPending()
    delegateKeys = -1L
    cachedVersion = -1L
    cachedCkptId = None
  }

  private def committed(version: Long, ckptId: Option[String], d: Long): Unit = synchronized {
    cachedVersion = version
    cachedCkptId = ckptId
    delegateVersion = d
  }

  private def isCached(colFamily: String): Boolean = singleValueFamilies.contains(colFamily)

  /** A column family the stores were told of: only single-value families are cached. */
  private def learnFamily(colFamily: String, spec: KeyStateEncoderSpec, multipleValues: Boolean): Unit = {
    encoders.put(colFamily, spec)
    if (multipleValues) singleValueFamilies.remove(colFamily) else singleValueFamilies.add(colFamily)
  }

  /** Reads through the slot cache, then the write-behind rows; shared by the read-only and the writable store. */
  private def cachedGet(inner: ReadStateStore, cache: RecordCache, counters: StoreCounters, key: UnsafeRow,
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
        val ck = CacheKey(colFamily, key, this)
        val logged = synchronized(if (pending.containsKey(ck)) Some(pending.get(ck)) else None)
        val value = logged.getOrElse {
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

  /** The write-behind rows of one column family now (a copy: the scan's caller may write meanwhile). */
  private def pendingOf(colFamily: String): Seq[(UnsafeRow, UnsafeRow)] = synchronized {
    val b = Seq.newBuilder[(UnsafeRow, UnsafeRow)]
    pending.forEach((k, v) => if (k.colFamily == colFamily) b += (k.key -> v))
    b.result()
  }

  /**
   * The delegate's rows at its version with the write-behind rows laid over them: a delegate row
   * whose key was changed since is skipped, and the changed rows that exist follow. Order: the
   * delegate's, then the order rows were last changed; used where no order is promised.
   */
  private def overlay(base: StateStoreIterator[UnsafeRowPair], colFamily: String,
      keep: UnsafeRow => Boolean): StateStoreIterator[UnsafeRowPair] = {
    val changed = pendingOf(colFamily).filter { case (k, _) => keep(k) }
    if (changed.isEmpty) return base
    val keys = new java.util.HashSet[UnsafeRow]()
    changed.foreach { case (k, _) => keys.add(k) }
    val pair = new UnsafeRowPair()
    val rows = base.iter.filterNot(p => keys.contains(p.key)) ++
      changed.iterator.collect { case (k, v) if v != null => pair.withRows(k, v) }
    new StateStoreIterator(rows, base.onClose)
  }

  /** Whether `key` starts with `prefix` under the family's prefix encoder (read stores only). */
  private def prefixMatcher(prefix: UnsafeRow, colFamily: String): UnsafeRow => Boolean =
    encoders.get(colFamily) match {
      case PrefixKeyScanStateEncoderSpec(keySchema, n) =>
        val types = keySchema.fields.take(n).map(_.dataType)
        (k: UnsafeRow) => types.indices.forall { i =>
          prefix.isNullAt(i) == k.isNullAt(i) && (k.isNullAt(i) || prefix.get(i, types(i)) == k.get(i, types(i)))
        }
      case other => throw new UnsupportedOperationException(s"sluice write-behind cache: prefix scan of column " +
        s"family '$colFamily' with key encoder $other while rows written since the delegate's last commit " +
        "are held in the write-behind log; read this version after the next delegate commit")
    }

  private def unordered(colFamily: String): Boolean = encoders.get(colFamily) match {
    case _: NoPrefixKeyStateEncoderSpec => true
    case _ => false
  }

  private final class CachingReadStore(override val version: Long, val inner: ReadStateStore, cache: RecordCache)
      extends ForwardingReadStore {
    val counters = new StoreCounters // carried into the write store when upgraded
    // Clean entries only: a read store never holds a dirty entry, so nothing is ever written.
    private val noWrites: DirtyWriter = (k, _) =>
      throw new IllegalStateException(s"read-only store asked to write $k")

    override def id: StateStoreId = inner.id
    override def get(key: UnsafeRow, colFamilyName: String): UnsafeRow =
      cachedGet(inner, cache, counters, key, colFamilyName, noWrites)
    override def valuesIterator(key: UnsafeRow, colFamilyName: String): Iterator[UnsafeRow] =
      inner.valuesIterator(key, colFamilyName)
    override def prefixScan(prefixKey: UnsafeRow, colFamilyName: String): StateStoreIterator[UnsafeRowPair] =
      if (pendingOf(colFamilyName).isEmpty) inner.prefixScan(prefixKey, colFamilyName)
      else overlay(inner.prefixScan(prefixKey, colFamilyName), colFamilyName, prefixMatcher(prefixKey, colFamilyName))
    override def iterator(colFamilyName: String): StateStoreIterator[UnsafeRowPair] =
      overlay(inner.iterator(colFamilyName), colFamilyName, _ => true)
    override def abort(): Unit = inner.abort()
    override def release(): Unit = inner.release()

    // A read store holds no dirty row; rows of the write-behind log are not in the delegate, so a
    // read the cache does not serve is answered by the delegate only when none of them is of the family.
    override protected[sluice] def passThrough(colFamilyName: String): ReadStateStore =
      if (pendingOf(colFamilyName).isEmpty) inner
      else throw new UnsupportedOperationException(s"sluice write-behind cache: a multi-value or range read of " +
        s"column family '$colFamilyName' while rows written since the delegate's last commit are held in the " +
        "write-behind log; read this version after the next delegate commit")
    override protected[sluice] def registered(colFamilyName: String, keyStateEncoderSpec: KeyStateEncoderSpec,
        useMultipleValuesPerKey: Boolean): Unit = learnFamily(colFamilyName, keyStateEncoderSpec, useMultipleValuesPerKey)
  }

  /**
   * A writable store at batch `version`. `writer` is the delegate's writable store, or null while
   * the delegate is only read (write-behind: opened read-only at its version; it becomes writable
   * when this batch must commit it). While `writer` is null, rows leaving the cache go to `pending`;
   * once set, `pending` has been written into it and is empty.
   */
  private final class CachingStateStore(override val version: Long, private var reader: ReadStateStore,
      private var writer: StateStore, cache: RecordCache, counters: StoreCounters, options: OpenOptions)
      extends ForwardingStore with DirtyWriter {
    private val owner = CachingStateStoreProvider.this
    private var done = false
    private var info: StateStoreCheckpointInfo = _
    private var keysAfter = -1L // the version's key count, set by commit
    cache.attach(owner, this) // takes this store's dirty rows if another store's insert evicts them
    if (writer != null) drainPending()

    private def inner: ReadStateStore = if (writer != null) writer else reader

    /** The delegate becomes writable: this batch commits it. */
    private def writable(): StateStore = {
      if (writer == null) {
        writer = SparkShim.upgradeStore(delegate, reader, delegateVersion, None,
          OpenOptions(forceSnapshotOnCommit = options.forceSnapshotOnCommit))
        reader = writer
        drainPending()
      }
      writer
    }

    private def drainPending(): Unit = {
      val rows = owner.synchronized {
        val b = Seq.newBuilder[(CacheKey, UnsafeRow)]
        pending.forEach((k, v) => b += (k -> v))
        clearPending()
        b.result()
      }
      rows.foreach { case (k, v) => toDelegate(k, v) }
    }

    private def toDelegate(key: CacheKey, value: UnsafeRow): Unit = {
      counters.delegateWrites += 1
      if (value == null) writer.remove(key.key, key.colFamily) else writer.put(key.key, value, key.colFamily)
    }

    override def write(key: CacheKey, value: UnsafeRow): Unit = {
      if (key.owner ne owner) throw new IllegalStateException(
        s"sluice record cache: a pending write of ${key.owner} reached $this; failing the task rather than " +
          "writing it to another store")
      if (writer != null) toDelegate(key, value) else owner.synchronized(addPending(key, value))
    }

    // The task ended with this store still open: Spark aborts it; its rows must not outlive it.
    override def discarded(): Unit = invalidate()

    override def id: StateStoreId = reader.id

    override def get(key: UnsafeRow, colFamilyName: String): UnsafeRow =
      cachedGet(inner, cache, counters, key, colFamilyName, this)

    private def putDirty(key: UnsafeRow, value: UnsafeRow, colFamilyName: String): Unit = {
      counters.evictions +=
        cache.putDirty(CacheKey(colFamilyName, key.copy(), owner), value, storeCapacity, this)
    }

    override def put(key: UnsafeRow, value: UnsafeRow, colFamilyName: String): Unit = {
      // As Spark's stores: a null value is refused (in the cache it would read as a remove).
      require(value != null, "Cannot put a null value")
      if (isCached(colFamilyName)) putDirty(key, value.copy(), colFamilyName)
      else writable().put(key, value, colFamilyName)
    }

    override def remove(key: UnsafeRow, colFamilyName: String): Unit =
      if (isCached(colFamilyName)) putDirty(key, null, colFamilyName)
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
      if (writer == null && isCached(colFamilyName) && unordered(colFamilyName)) {
        flush() // into pending
        overlay(reader.iterator(colFamilyName), colFamilyName, _ => true)
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
      learnFamily(colFamilyName, keyStateEncoderSpec, useMultipleValuesPerKey)
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
      learnFamily(colFamilyName, keyStateEncoderSpec, useMultipleValuesPerKey)
    }

    override def removeColFamilyIfExists(colFamilyName: String): Boolean = {
      val w = writable()
      cache.dropColumnFamily(colFamilyName, owner)
      singleValueFamilies.remove(colFamilyName)
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
        val due = writer != null || intervalMs <= 0 || now - lastDelegateCommitMs >= intervalMs ||
          owner.synchronized(pendingBytes) > storeShare / 2
        val newVersion = version + 1
        val d = if (due) {
          val w = writable()
          flush()
          val dv = w.commit()
          lastDelegateCommitMs = now
          counters.delegateCommits += 1
          keysAfter = w.metrics.numKeys
          owner.synchronized { delegateKeys = keysAfter }
          dv
        } else {
          keysAfter = keysWithLogAndRelease(reader)
          delegateVersion
        }
        val rows = owner.synchronized {
          val b = Seq.newBuilder[LoggedRow]
          pending.forEach((k, v) => b += LoggedRow(k.colFamily, k.key, v))
          b.result()
        }
        if (d != newVersion || rows.nonEmpty) log.write(WriteBehindEntry(newVersion, d, rows))
        else log.clear(newVersion)
        val delegateInfo = if (due && d == newVersion) Some(writer.getStateStoreCheckpointInfo()) else None
        info = delegateInfo.getOrElse(StateStoreCheckpointInfo(id.partitionId, newVersion, None, None))
        // The delegate reports its own version when it commits; Spark's validation counts batch versions.
        if (delegateInfo.isEmpty && storeConf.commitValidationEnabled) {
          StateStore.reportCommitToCoordinator(newVersion, id, hadoopConfiguration)
        }
        committed(newVersion, info.stateStoreCkptId, d)
        marker.commitDone(delegateName)
        cache.detach(owner)
        counters.sizeBytes = cache.ownerBytes(owner)
        counters.logRows = rows.size
        done = true
        newVersion
      } catch {
        case NonFatal(e) => cache.detach(owner); invalidate(); throw e
      }
    }

    override def abort(): Unit = {
      cache.detach(owner)
      invalidate()
      if (writer != null) writer.abort() else reader.release()
    }

    // Spark's own metrics as the delegate alone would report them: the key count after this batch
    // (with the logged rows when the delegate did not commit) and the memory of the cache's rows on
    // top of the delegate's. In a batch where the delegate did not commit, its custom metrics
    // describe its last commit, not this batch, and are left out.
    override def metrics: StateStoreMetrics = {
      val m = if (writer != null) writer.metrics else reader match {
        case s: StateStore => val r = s.metrics; StateStoreMetrics(r.numKeys, r.memoryUsedBytes, Map.empty)
        case _ => StateStoreMetrics(0L, 0L, Map.empty)
      }
      val cacheBytes = cache.ownerBytes(owner) + owner.synchronized(pendingBytes)
      StateStoreMetrics(if (keysAfter >= 0) keysAfter else m.numKeys, m.memoryUsedBytes + cacheBytes,
        m.customMetrics ++ counters.metrics)
    }

    override def getStateStoreCheckpointInfo(): StateStoreCheckpointInfo =
      if (info != null) info else inner match {
        case s: StateStore => s.getStateStoreCheckpointInfo()
        case _ => StateStoreCheckpointInfo(id.partitionId, version + 1, None, None)
      }
    override def hasCommitted: Boolean = done
    override def toString: String = s"CachingStateStore[$inner]"
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
  private val FormatKey = SessionConf.CheckpointFormatKey

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
      Some(s"$interval=$intervalMs with ${SessionConf.ProviderClassKey}=${SluiceConf.CachingProviderClass} " +
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
