package sluice.cache.internal

import org.apache.spark.sql.catalyst.expressions.UnsafeRow

import sluice.spark.StateStoreTypes.{ReadStateStore, StateStore, StateStoreIterator, UnsafeRowPair}

/**
 * What a caching provider's store holds beside its delegate under write-behind, for the batch
 * version the provider's cached rows describe: the delegate version it builds on and every row
 * changed since (value null: removed), in the order they were last changed. The provider holds it,
 * not the slot cache, so another store's inserts can never evict a row only this holds; [[log]]
 * keeps the same per batch version on disk.
 *
 * Guarded by `owner` (the provider, also the owner of its rows in the slot cache): every method
 * takes its lock, and the provider takes it around steps that must see these rows and its own
 * state together.
 */
private[sluice] final class WriteBehindState(owner: AnyRef) {
  private var _log: WriteBehindLog = _
  // The delegate version the rows build on.
  private var _delegateVersion = -1L
  private val pending = new java.util.LinkedHashMap[CacheKey, UnsafeRow]()
  private var pendingBytes = 0L
  // Spark's state row count must not depend on when the delegate commits: the delegate's key count
  // at the delegate version (-1: not known yet) and, per key of `pending`, whether the delegate has
  // it there. So a batch that only logs its rows reports the count the delegate would after them.
  private var delegateKeys = -1L
  private val inDelegate = new java.util.HashMap[CacheKey, java.lang.Boolean]()

  /**
   * Wall clock of the delegate's last commit: it only decides *when* the delegate commits, never
   * what a batch reads or emits (the logical state after each batch is the same either way).
   */
  var lastDelegateCommitMs = 0L

  /** The store's write-behind log (set once the provider knows its store). */
  def open(log: WriteBehindLog): Unit = _log = log
  def log: WriteBehindLog = _log

  def delegateVersion: Long = _delegateVersion
  def bytes: Long = owner.synchronized(pendingBytes)

  /** Forgets the rows and what is known of the delegate's keys: they describe no version now. */
  def reset(): Unit = owner.synchronized { clearRows(); delegateKeys = -1L }

  private def clearRows(): Unit = { pending.clear(); pendingBytes = 0L; inDelegate.clear() }

  /**
   * Batch version `version` as its write-behind file gives it: the delegate version it builds on
   * and the rows changed since (no file: the delegate's version of the same number, no rows).
   * Returns whether the version has a file.
   */
  def load(version: Long): Boolean = owner.synchronized {
    val entry = log.read(version)
    _delegateVersion = entry.map(_.delegateVersion).getOrElse(version)
    entry.foreach(_.rows.foreach(r => add(CacheKey(r.colFamily, r.key, owner), r.value)))
    entry.isDefined
  }

  /** Batch version `version` starts empty on the delegate's version of the same number. */
  def startEmpty(version: Long): Unit = owner.synchronized {
    log.clear(version)
    _delegateVersion = version
  }

  /** The rows now build on delegate version `version` (a batch version committed on it). */
  def buildOn(version: Long): Unit = owner.synchronized { _delegateVersion = version }

  /** The delegate committed, holding `keys` keys. */
  def delegateCommitted(keys: Long): Unit = owner.synchronized { delegateKeys = keys }

  def add(key: CacheKey, value: UnsafeRow): Unit = owner.synchronized {
    if (pending.containsKey(key)) { // re-inserted last: the log keeps the order rows were last changed
      pendingBytes -= RecordCache.entrySize(key, pending.remove(key))
    }
    pending.put(key, value)
    pendingBytes += RecordCache.entrySize(key, value)
  }

  /** The logged value of `key` (null: removed), or None when it was not changed. */
  def logged(key: CacheKey): Option[UnsafeRow] =
    owner.synchronized(if (pending.containsKey(key)) Some(pending.get(key)) else None)

  /** Every changed row, removed from here (they are about to be written to the delegate). */
  def drain(): Seq[(CacheKey, UnsafeRow)] = owner.synchronized {
    val b = Seq.newBuilder[(CacheKey, UnsafeRow)]
    pending.forEach((k, v) => b += (k -> v))
    clearRows()
    b.result()
  }

  /** Every changed row, as a batch version's file records them. */
  def rows: Seq[LoggedRow] = owner.synchronized {
    val b = Seq.newBuilder[LoggedRow]
    pending.forEach((k, v) => b += LoggedRow(k.colFamily, k.key, v))
    b.result()
  }

  /** The changed rows of one column family now (a copy: the scan's caller may write meanwhile). */
  def rowsOf(colFamily: String): Seq[(UnsafeRow, UnsafeRow)] = owner.synchronized {
    val b = Seq.newBuilder[(UnsafeRow, UnsafeRow)]
    pending.forEach((k, v) => if (k.colFamily == colFamily) b += (k.key -> v))
    b.result()
  }

  /**
   * The delegate's rows at its version with the changed rows laid over them: a delegate row
   * whose key was changed since is skipped, and the changed rows that exist follow. Order: the
   * delegate's, then the order rows were last changed; used where no order is promised.
   */
  def overlay(base: StateStoreIterator[UnsafeRowPair], colFamily: String,
      keep: UnsafeRow => Boolean): StateStoreIterator[UnsafeRowPair] = {
    val changed = rowsOf(colFamily).filter { case (k, _) => keep(k) }
    if (changed.isEmpty) return base
    val keys = new java.util.HashSet[UnsafeRow]()
    changed.foreach { case (k, _) => keys.add(k) }
    val pair = UnsafeRowPair()
    val rows = base.iter.filterNot(p => keys.contains(p.key)) ++
      changed.iterator.collect { case (k, v) if v != null => pair.withRows(k, v) }
    StateStoreIterator(rows, base.onClose)
  }

  /**
   * The number of keys after this batch while its rows are only logged: the delegate's count at
   * the delegate version plus, per logged key, whether it exists now minus whether it did there.
   * `reader` is the delegate's store at that version, still open; this releases it (a RocksDB
   * store reports its count only once released).
   */
  def keysWithLogAndRelease(reader: ReadStateStore): Long = {
    val rows = owner.synchronized {
      val b = Seq.newBuilder[(CacheKey, Boolean, java.lang.Boolean)]
      pending.forEach((k, v) => b += ((k, v != null, inDelegate.get(k))))
      b.result()
    }
    val delta = rows.map { case (k, exists, known) =>
      val before = if (known != null) known.booleanValue()
      else {
        val b = reader.get(k.key, k.colFamily) != null
        owner.synchronized { if (pending.containsKey(k)) inDelegate.put(k, b) }
        b
      }
      (if (exists) 1L else 0L) - (if (before) 1L else 0L)
    }.sum
    val known = owner.synchronized(delegateKeys)
    val base = if (known >= 0) { reader.release(); known }
    else reader match {
      case s: StateStore => reader.release(); s.metrics.numKeys
      case r => // a read-only store without metrics (HDFS-backed): count it, once per loaded version
        val n =
          try {
            val it = r.iterator(StateStore.DEFAULT_COL_FAMILY_NAME);
            try it.size.toLong
            finally it.close()
          } finally r.release()
        n
    }
    owner.synchronized { delegateKeys = base }
    base + delta
  }

  /**
   * Records batch version `version` (delegate version `delegateVersion` plus `rows`) in its file;
   * a version equal to its delegate's with no rows has none.
   */
  def record(version: Long, delegateVersion: Long, rows: Seq[LoggedRow]): Unit =
    if (delegateVersion != version || rows.nonEmpty) log.write(WriteBehindEntry(version, delegateVersion, rows))
    else log.clear(version)

  /** Deletes the files no batch version among the last `retain` needs. */
  def deleteUnneeded(retain: Long): Unit = {
    val versions = log.versions()
    if (versions.nonEmpty) log.deleteBelow(versions.last - retain)
  }
}
