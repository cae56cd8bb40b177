package sluice.windowstore

import java.io.{DataInputStream, DataOutputStream, IOException}
import java.util.Locale

import scala.util.control.NonFatal

import net.jpountz.lz4.{LZ4BlockInputStream, LZ4BlockOutputStream}
import org.apache.hadoop.conf.Configuration

import org.apache.spark.TaskContext
import org.apache.spark.internal.Logging
import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.types.StructType

import sluice.conf.{ConfResolver, SluiceConf}
import sluice.spark.StateStoreTypes._
import org.apache.spark.sql.sluice.ReplayedChanges

import sluice.spark.{Maintenance, OpenOptions, ProviderBase, ProviderSpec, SparkSessionConf, SingleFamilyReadStore}
import sluice.state.{FileFormats, SluiceFileFormatException, StoreFiles}
import sluice.windowstore.internal.{RowTable, SegmentedStateMap, WindowField}

/**
 * KIP-428's in-memory window store as a Spark state store provider
 * (`spark.sql.streaming.stateStore.providerClass=sluice.windowstore.InMemoryWindowStoreProvider`).
 *
 * State lives in one [[SegmentedStateMap]] per provider; a micro-batch mutates it in place and
 * keeps only what it needs to roll back, so opening a version costs nothing and committing costs
 * the batch's changes. Files under the store's checkpoint directory:
 *  - `N.wdelta`: the keys version N changed (puts and removes) and the stream time after N;
 *  - `N.wsnapshot`: all entries of version N and its stream time, written by `doMaintenance`
 *    every `spark.sluice.windowstore.snapshot.interval` versions.
 * Loading version N reads the latest snapshot at or before N and the deltas after it. Asking for a
 * version other than the live one (a replayed batch, or another executor moved on) reloads it.
 */
class InMemoryWindowStoreProvider private[windowstore] (fixedSettings: Option[WindowStoreSettings])
  extends ProviderBase with ReplayedChanges with Logging {
  import InMemoryWindowStoreProvider._

  /** Spark creates providers by reflection with this constructor. */
  def this() = this(None)

  @volatile private var _id: StateStoreId = _
  private var keySchema: StructType = _
  private var valueSchema: StructType = _
  private var numColsPrefixKey = 0
  private var hadoopConf: Configuration = _
  private var minVersionsToRetain = 100
  private var commitValidation = false
  private[windowstore] var settings: WindowStoreSettings = _
  private lazy val baseDir = _id.storeCheckpointLocation()
  private lazy val files = StoreFiles(baseDir, hadoopConf)

  // Guarded by this: the live map, its committed version and the open writer.
  private var map: SegmentedStateMap = _
  private var liveVersion = -1L
  private var writer: WriteStore = null

  override protected def setUp(spec: ProviderSpec): Unit = {
    if (spec.useColumnFamilies) throw StateStoreErrors.multipleColumnFamiliesNotSupported(ProviderName)
    if (spec.useMultipleValuesPerKey) {
      throw StateStoreErrors.unsupportedOperationException("multipleValuesPerKey", ProviderName)
    }
    checkpointFormatRefusal(spec.storeConf.stateStoreCheckpointFormatVersion)
      .foreach(m => throw StateStoreErrors.stateStoreCheckpointIdsNotSupported(m))
    numColsPrefixKey = spec.keyStateEncoderSpec match {
      case NoPrefixKeyStateEncoderSpec(_) => 0
      case PrefixKeyScanStateEncoderSpec(_, n) => n
      case other => throw StateStoreErrors.unsupportedOperationException(
          other.getClass.getSimpleName, ProviderName)
    }
    this._id = spec.stateStoreId
    this.keySchema = spec.keySchema
    this.valueSchema = spec.valueSchema
    this.hadoopConf = spec.hadoopConf
    this.minVersionsToRetain = spec.storeConf.minVersionsToRetain
    this.commitValidation = spec.storeConf.commitValidationEnabled
    this.settings = fixedSettings.getOrElse(WindowStoreSettings.current())
    this.map = newMap()
    files.mkdirs()
    logInfo(s"Initialized $this with $settings, window field ${WindowField.find(keySchema)}")
  }

  private def newMap() =
    new SegmentedStateMap(keySchema, valueSchema.length, numColsPrefixKey, settings.retentionMicros)

  override def stateStoreId: StateStoreId = _id

  override protected def openStore(version: Long, uniqueId: Option[String], options: OpenOptions): StateStore = {
    checkNoCheckpointId(uniqueId)
    synchronized {
      awaitNoWriter()
      if (options.loadEmpty) {
        // Spark rewriting state (spark-4.2+: StatePartitionWriter, e.g. repartitioning) writes version + 1
        // from nothing. The live map describes no stored version until that commit.
        map.clear()
        map.streamTime = Long.MinValue
        liveVersion = -1
      } else load(version)
      map.begin()
      map.expire()
      writer = new WriteStore(version, options.forceSnapshotOnCommit, fromEmpty = options.loadEmpty)
      writer
    }
  }

  override def getReadStore(version: Long, uniqueId: Option[String]): ReadStateStore = {
    checkNoCheckpointId(uniqueId)
    synchronized {
      awaitNoWriter()
      load(version)
      new ReadStore(version)
    }
  }

  override protected def upgradeStore(readStore: ReadStateStore, version: Long, uniqueId: Option[String],
      options: OpenOptions): StateStore =
    openStore(version, uniqueId, options)

  override def supportedCustomMetrics: Seq[StateStoreCustomMetric] =
    Seq(SegmentsMetric, MemoryBytesMetric, ExpiredDropsMetric, CompactionBytesMetric)

  /** Writes a snapshot when due and deletes files no longer needed to load the last
   *  `minBatchesToRetain` versions. The snapshot is of a frozen view taken between batches, and
   *  written while the next batches run. */
  override protected[sluice] def maintain(work: Maintenance): Unit = {
    try {
      if (work.snapshots) {
        val lastSnapshot = listFiles().filter(_.snapshot).map(_.version).foldLeft(0L)(math.max)
        val due = synchronized {
          if (writer == null && liveVersion > 0 && liveVersion - lastSnapshot >= settings.snapshotInterval) {
            Some((liveVersion, map.freeze()))
          } else None
        }
        due.foreach { case (version, (entries, streamTime)) =>
          try writeSnapshot(version, entries, streamTime)
          finally entries.foreach(_.release())
        }
      }
      if (work.cleanup) cleanup()
    } catch {
      case NonFatal(e) => logWarning(s"Maintenance of $this failed", e)
    }
  }

  override def close(): Unit = synchronized {
    if (map != null) map.clear()
    liveVersion = -1
  }

  override def toString: String = s"$ProviderName[${_id}]"

  // ---- versions ----

  // A store checkpoint id comes only from a query running with the format that has them.
  private def checkNoCheckpointId(uniqueId: Option[String]): Unit = {
    if (uniqueId.isDefined) {
      checkpointFormatRefusal(FormatWithCheckpointIds)
        .foreach(m => throw StateStoreErrors.stateStoreCheckpointIdsNotSupported(m))
    }
  }

  /** Waits for a previous attempt's open version to commit or abort (its task completion
   *  listener aborts it), then fails rather than share the map with it. */
  private def awaitNoWriter(): Unit = {
    val deadline = System.currentTimeMillis() + WriterWaitMs
    while (writer != null && System.currentTimeMillis() < deadline) {
      wait(math.max(1L, deadline - System.currentTimeMillis()))
    }
    if (writer != null) {
      throw new IllegalStateException(
        s"$this: version ${writer.version + 1} is still open in another task; cannot open a second one")
    }
  }

  /** Makes the live map hold `version`: nothing to do for the live version, deltas for a newer
   *  one when they follow on, otherwise a rebuild from snapshot and deltas. */
  /** Makes the live map hold `version`: from the live one by its deltas when it can, else from the
   *  latest snapshot at or before it (or the snapshot of `fromSnapshot`, which must exist). */
  private def load(version: Long, fromSnapshot: Option[Long] = None): Unit = {
    if (version < 0) throw new IllegalArgumentException(s"$this: invalid state version $version")
    if (version == liveVersion && fromSnapshot.isEmpty) return
    try {
      if (fromSnapshot.isEmpty && liveVersion >= 0 && version > liveVersion &&
        (liveVersion + 1 to version).forall(v => files.exists(deltaFile(v)))) {
        (liveVersion + 1 to version).foreach(v => readFile(deltaFile(v), isSnapshot = false))
      } else {
        map.clear()
        map.streamTime = Long.MinValue
        if (version > 0) {
          val snapshot = fromSnapshot.getOrElse(listFiles().filter(f => f.snapshot && f.version <= version)
              .map(_.version).foldLeft(0L)(math.max))
          if (snapshot > 0) readFile(snapshotFile(snapshot), isSnapshot = true)
          (snapshot + 1 to version).foreach(v => readFile(deltaFile(v), isSnapshot = false))
        }
      }
      liveVersion = version
    } catch {
      case e: Throwable =>
        map.clear()
        liveVersion = -1
        throw StateStoreErrors.cannotLoadStore(e)
    }
    logInfo(s"Loaded version $version of $this: ${map.numKeys} keys in ${map.numSegments} segments")
  }

  /**
   * Writes the store's version + 1: its delta, and a snapshot when asked. A version written from an
   * empty store has no delta (a delta only applies on top of the version before it): its snapshot
   * alone holds it, and a delta of that number left by an earlier run is removed, so every load of
   * it, or of a later version, starts from that snapshot.
   */
  private def commitVersion(store: WriteStore, snapshot: Boolean): Long = synchronized {
    val newVersion = store.version + 1
    try {
      if (store.fromEmpty) {
        map.commit(new DataOutputStream(java.io.OutputStream.nullOutputStream()))
        if (files.exists(deltaFile(newVersion))) files.delete(deltaFile(newVersion))
      } else writeFile(deltaFile(newVersion), DeltaMagic) { data => map.commit(data); map.streamTime }
      if (snapshot || store.fromEmpty) {
        val (entries, streamTime) = map.freeze()
        try writeSnapshot(newVersion, entries, streamTime)
        finally entries.foreach(_.release())
      }
    } catch {
      case e: Throwable =>
        // The live map now holds a version that is not on disk: forget it.
        map.clear()
        liveVersion = -1
        writer = null
        notifyAll()
        throw e
    }
    liveVersion = newVersion
    writer = null
    notifyAll()
    newVersion
  }

  private def abortVersion(store: WriteStore): Unit = synchronized {
    map.rollback()
    if (store.fromEmpty) map.clear() // the map held no stored version (liveVersion stays -1)
    writer = null
    notifyAll()
  }

  // ---- files ----

  private case class StoreFile(version: Long, snapshot: Boolean, name: String)

  private def deltaFile(v: Long) = InMemoryWindowStoreProvider.deltaFile(v)
  private def snapshotFile(v: Long) = InMemoryWindowStoreProvider.snapshotFile(v)

  private def listFiles(): Seq[StoreFile] = {
    files.list().flatMap { name =>
      name.split('.') match {
        case Array(v, suffix) if v.forall(_.isDigit) && v.nonEmpty =>
          suffix.toLowerCase(Locale.ROOT) match {
            case DeltaSuffix => Some(StoreFile(v.toLong, snapshot = false, name))
            case SnapshotSuffix => Some(StoreFile(v.toLong, snapshot = true, name))
            case _ => None
          }
        case _ => None
      }
    }.sortBy(f => (f.version, f.snapshot))
  }

  private def writeSnapshot(version: Long, tables: Seq[RowTable.Frozen], streamTime: Long): Unit = {
    writeFile(snapshotFile(version), SnapshotMagic) { data => tables.foreach(_.writeTo(data)); streamTime }
    logInfo(s"Wrote snapshot of version $version of $this")
  }

  private def writeFile(name: String, magic: Int)(records: DataOutputStream => Long): Unit =
    InMemoryWindowStoreProvider.writeFile(files, name, magic)(records)

  /** Applies a delta or snapshot file to the live map, then its stream time and expiry. */
  private def readFile(path: String, isSnapshot: Boolean): Unit = {
    val streamTime = readRecords(path, isSnapshot)(map.rawPut, map.rawRemove, map.rawClear)
    map.streamTime = math.max(map.streamTime, streamTime)
    map.expire()
  }

  /** Hands a delta or snapshot file's records to `put`, `remove` and `clear` (a window start), in the
   *  file's order, and returns the stream time it ends with. */
  private def readRecords(path: String, isSnapshot: Boolean)(put: (UnsafeRow, UnsafeRow) => Unit,
      remove: UnsafeRow => Unit, clear: Long => Unit): Long = {
    val raw = StoreFiles.openExisting(files, path, this)
    val in = new DataInputStream(new LZ4BlockInputStream(raw))
    val fullPath = new org.apache.hadoop.fs.Path(baseDir, path).toString
    try {
      checkMagic(fullPath, in.readInt(), isSnapshot)
      val scratch = new Array[Byte](8)
      def corrupt(what: String) = new IOException(s"$path is corrupt ($what in snapshot)")
      val removes: UnsafeRow => Unit = if (isSnapshot) _ => throw corrupt("remove") else remove
      val clears: Long => Unit = if (isSnapshot) _ => throw corrupt("cleared window") else clear
      while (RowTable.readRecord(in, scratch, keySchema.length, valueSchema.length, put, removes, clears)) {}
      in.readLong()
    } catch {
      case e: SluiceFileFormatException => throw e
      case e: IOException => throw new IOException(s"$fullPath: ${e.getMessage}", e)
    } finally {
      in.close()
    }
  }

  // ---- Spark's state data source: readChangeFeed, snapshotStartBatchId ----

  /**
   * Each version's changes as Spark's HDFS-backed provider's feed gives its deltas: every put in the
   * delta with its value, and a delete of every key that left the store in that version. A key leaves
   * by a remove record, by its window emptied (one record in the delta), or by its segment expiring
   * once stream time passed it (no record at all): so the deletes are the keys of the version before,
   * and those put in this one, that the version no longer holds.
   */
  override protected def changes(startVersion: Long, endVersion: Long)
      : Iterator[(Boolean, UnsafeRow, UnsafeRow, Long)] = {
    if (startVersion < 1 || endVersion < startVersion) {
      throw new IllegalArgumentException(s"$this: no change feed from version $startVersion to $endVersion")
    }
    Iterator.range(startVersion, endVersion + 1).flatMap { v =>
      synchronized {
        awaitNoWriter()
        load(v - 1)
        val held = scala.collection.mutable.LinkedHashSet[UnsafeRow]()
        map.iterator().foreach(p => held += p.key.copy())
        val puts = scala.collection.mutable.ArrayBuffer[(Boolean, UnsafeRow, UnsafeRow, Long)]()
        readRecords(deltaFile(v), isSnapshot = false)(
          (k, value) => { puts += ((true, k.copy(), value.copy(), v - 1)); held += k.copy() }, _ => (), _ => ())
        load(v)
        puts ++ held.iterator.filter(k => map.get(k) == null).map(k => (false, k, null: UnsafeRow, v - 1))
      }
    }
  }

  override protected def fromSnapshot(snapshotVersion: Long, endVersion: Long): StateStore = synchronized {
    if (snapshotVersion < 1 || !files.exists(snapshotFile(snapshotVersion))) {
      throw new IllegalStateException(
        s"$this has no snapshot of version $snapshotVersion (${snapshotFile(snapshotVersion)}) to replay from")
    }
    awaitNoWriter()
    load(endVersion, Some(snapshotVersion))
    map.begin()
    map.expire()
    writer = new WriteStore(endVersion, snapshotOnCommit = false)
    writer
  }

  /** Deletes files older than the snapshot needed to load the oldest retained version. */
  private def cleanup(): Unit = {
    val stored = listFiles()
    if (stored.isEmpty) return
    val oldestToKeep = stored.last.version - minVersionsToRetain
    if (oldestToKeep <= 0) return
    val base = stored.filter(f => f.snapshot && f.version <= oldestToKeep).map(_.version)
      .foldLeft(0L)(math.max)
    if (base > 0) {
      stored.filter(f => f.version < base || (f.version == base && !f.snapshot))
        .foreach(f => files.delete(f.name))
    }
  }

  // ---- stores ----

  private def checkDefault(colFamilyName: String): Unit = {
    if (colFamilyName != StateStore.DEFAULT_COL_FAMILY_NAME) {
      throw StateStoreErrors.multipleColumnFamiliesNotSupported(ProviderName)
    }
  }

  // Not synchronized: a snapshot being written must not block the task reading its metrics.
  // Both sums walk the segments: taken once.
  private def metricsNow(): StateStoreMetrics = {
    val bytes = map.memoryBytes
    StateStoreMetrics(map.numKeys, bytes,
      Map(
        SegmentsMetric -> map.numSegments.toLong,
        MemoryBytesMetric -> bytes,
        ExpiredDropsMetric -> map.droppedPuts,
        CompactionBytesMetric -> map.compactionBytes))
  }

  /** Reads of the live map, the same for the read and the write store. */
  private trait LiveMapReads extends SingleFamilyReadStore {
    override protected def providerName: String = ProviderName
    override def id: StateStoreId = _id
    override def get(key: UnsafeRow, colFamilyName: String): UnsafeRow = {
      checkDefault(colFamilyName)
      map.get(key)
    }
    override def valuesIterator(key: UnsafeRow, colFamilyName: String): Iterator[UnsafeRow] =
      throw StateStoreErrors.unsupportedOperationException("multipleValuesPerKey", ProviderName)
    override def prefixScan(prefixKey: UnsafeRow, colFamilyName: String)
        : StateStoreIterator[UnsafeRowPair] = {
      checkDefault(colFamilyName)
      StateStoreIterator(map.prefixScan(prefixKey))
    }
    override def iterator(colFamilyName: String): StateStoreIterator[UnsafeRowPair] = {
      checkDefault(colFamilyName)
      StateStoreIterator(map.iterator())
    }
  }

  private class ReadStore(val version: Long) extends LiveMapReads {
    override def abort(): Unit = ()
    override def release(): Unit = ()
    override def toString: String = s"${InMemoryWindowStoreProvider.this}.read(v$version)"
  }

  private class WriteStore(val version: Long, snapshotOnCommit: Boolean, val fromEmpty: Boolean = false)
    extends StateStore with LiveMapReads {
    @volatile private var state = 0 // 0 open, 1 committed, 2 aborted

    Option(TaskContext.get()).foreach(_.addTaskCompletionListener[Unit](_ => if (state == 0) abort()))

    private def checkOpen(op: String): Unit =
      if (state != 0) throw new IllegalStateException(s"Cannot $op after the store was committed or aborted")

    override def put(key: UnsafeRow, value: UnsafeRow, colFamilyName: String): Unit = {
      checkDefault(colFamilyName)
      require(value != null, "Cannot put a null value")
      checkOpen("put")
      map.put(key, value)
    }
    override def remove(key: UnsafeRow, colFamilyName: String): Unit = {
      checkDefault(colFamilyName)
      checkOpen("remove")
      map.remove(key)
    }
    override def commit(): Long = {
      checkOpen("commit")
      val v = commitVersion(this, snapshotOnCommit)
      state = 1
      // spark-4.1: Spark checks that a foreachBatch batch committed every store, as the HDFS provider reports.
      if (commitValidation) StateStore.reportCommitToCoordinator(v, _id, hadoopConf)
      v
    }
    override def abort(): Unit = {
      if (state == 0) {
        state = 2
        abortVersion(this)
      }
    }
    override def hasCommitted: Boolean = state == 1
    override def metrics: StateStoreMetrics = metricsNow()
    override def getStateStoreCheckpointInfo(): StateStoreCheckpointInfo =
      StateStoreCheckpointInfo(_id.partitionId, version + 1, None, None)

    override def createColFamilyIfAbsent(name: String, keySchema: StructType, valueSchema: StructType,
        keyStateEncoderSpec: KeyStateEncoderSpec, useMultipleValuesPerKey: Boolean,
        isInternal: Boolean): Unit =
      throw StateStoreErrors.multipleColumnFamiliesNotSupported(ProviderName)
    override def removeColFamilyIfExists(colFamilyName: String): Boolean =
      throw StateStoreErrors.removingColumnFamiliesNotSupported(ProviderName)
    override def putList(key: UnsafeRow, values: Array[UnsafeRow], colFamilyName: String): Unit =
      throw StateStoreErrors.unsupportedOperationException("putList", ProviderName)
    override def merge(key: UnsafeRow, value: UnsafeRow, colFamilyName: String): Unit =
      throw StateStoreErrors.unsupportedOperationException("merge", ProviderName)
    override def mergeList(key: UnsafeRow, values: Array[UnsafeRow], colFamilyName: String): Unit =
      throw StateStoreErrors.unsupportedOperationException("mergeList", ProviderName)
    override def toString: String = s"${InMemoryWindowStoreProvider.this}.write(v$version)"
  }

  // ---- test hooks ----
  private[windowstore] def liveMap: SegmentedStateMap = map
  private[windowstore] def loadedVersion: Long = synchronized(liveVersion)
  private[windowstore] def storeFiles: Seq[(Long, Boolean)] = listFiles().map(f => (f.version, f.snapshot))
}

object InMemoryWindowStoreProvider {
  val ProviderName = "InMemoryWindowStoreProvider"
  private val DeltaSuffix = "wdelta"
  private val SnapshotSuffix = "wsnapshot"
  // A file's magic is "SLW" (delta) or "SLS" (snapshot) followed by its format's digit
  // (FileFormats.WindowStoreFile): format 2 stores records as they lie in pages.
  private def Format = FileFormats.WindowStoreFile
  private val DeltaPrefix = 0x534c5700 // "SLW"
  private val SnapshotPrefix = 0x534c5300 // "SLS"
  private def DeltaMagic = DeltaPrefix | ('0' + Format.current)
  private def SnapshotMagic = SnapshotPrefix | ('0' + Format.current)

  /** Fails unless `magic` opens a delta (or snapshot) file of a format this sluice reads. */
  private def checkMagic(path: String, magic: Int, isSnapshot: Boolean): Unit = {
    val digit = (magic & 0xff) - '0'
    if ((magic & 0xffffff00) != (if (isSnapshot) SnapshotPrefix else DeltaPrefix) || digit < 0 || digit > 9) {
      throw new IOException(s"$path is not a $ProviderName file (bad header)")
    }
    Format.check(path, digit)
  }

  /** LZ4 block: larger than the 64 KiB default, for fewer native calls per file. */
  private val BlockSize = 256 * 1024
  private val WriterWaitMs = 60000L

  private def deltaFile(v: Long) = s"$v.$DeltaSuffix"
  private def snapshotFile(v: Long) = s"$v.$SnapshotSuffix"

  /** A delta or snapshot file: magic, the records `records` writes, the end record, then the
   *  stream time `records` returns (read back by `readFile`). */
  private def writeFile(files: StoreFiles, name: String, magic: Int)(records: DataOutputStream => Long): Unit =
    files.write(name) { out =>
      val data = new DataOutputStream(new LZ4BlockOutputStream(out, BlockSize))
      data.writeInt(magic)
      val streamTime = records(data)
      RowTable.writeEnd(data, new Array[Byte](8))
      data.writeLong(streamTime)
      data.close()
    }

  /**
   * Makes the store in `storeDir` start empty at `version` when it has no file yet: an empty
   * snapshot of that version, from which loading it and later versions proceeds as usual. For a
   * store that a query adds to a checkpoint it has run for `version` batches already (the emission
   * cache, once a commit interval is set); the caller knows the store is new (its operator has no
   * state directory), so a store whose files were lost is never started empty here.
   */
  private[sluice] def startEmpty(storeDir: org.apache.hadoop.fs.Path, hadoopConf: Configuration, version: Long)
      : Unit = {
    val files = StoreFiles(storeDir, hadoopConf)
    if (version > 0 && !hasVersions(files)) {
      files.mkdirs()
      writeFile(files, snapshotFile(version), SnapshotMagic)(_ => Long.MinValue)
    }
  }

  /** Whether the store in `storeDir` has written a version (Spark's `_metadata` does not count). */
  private[sluice] def hasVersions(storeDir: org.apache.hadoop.fs.Path, hadoopConf: Configuration): Boolean =
    hasVersions(StoreFiles(storeDir, hadoopConf))

  private def hasVersions(files: StoreFiles): Boolean =
    files.list().exists(n => n.endsWith(s".$DeltaSuffix") || n.endsWith(s".$SnapshotSuffix"))

  private val FormatKey = SparkSessionConf.CheckpointFormatKey

  /** Spark's state store checkpoint format from which stores are opened with checkpoint ids. */
  private val FormatWithCheckpointIds = 2

  /**
   * Why the window store cannot run under state store checkpoint format `formatVersion`, or None:
   * its files are named by version alone, without the checkpoint ids of format 2. The one text for
   * the store when it opens and for SluicePlugin's check of the session's conf at start.
   */
  def checkpointFormatRefusal(formatVersion: Int): Option[String] =
    if (formatVersion < FormatWithCheckpointIds) None
    else Some(s"${classOf[InMemoryWindowStoreProvider].getName} needs $FormatKey=1, got $formatVersion: " +
      s"it names its files by version alone, without the store checkpoint ids of format $FormatWithCheckpointIds. " +
      s"Set $FormatKey=1 (or unset it)")

  val SegmentsMetric: StateStoreCustomMetric =
    StateStoreCustomSumMetric("windowStoreSegments", "number of window segments in the window store")
  val MemoryBytesMetric: StateStoreCustomMetric =
    StateStoreCustomSizeMetric("windowStoreMemoryBytes", "estimated memory of the window store")
  val ExpiredDropsMetric: StateStoreCustomMetric =
    StateStoreCustomSumMetric("expiredWindowRecordDropTotal",
      "puts dropped because their window was past retention")
  val CompactionBytesMetric: StateStoreCustomMetric =
    StateStoreCustomSizeMetric("windowStoreCompactionBytes",
      "live record bytes compaction copied after the commit, reclaiming overwritten and removed records")
}

/** The provider's `spark.sluice.windowstore.*` settings. */
final case class WindowStoreSettings(
    name: String, retentionMs: Long, snapshotInterval: Int) {

  /** Retention in Spark's timestamp unit; 0 keeps windows until Spark's own eviction removes them. */
  def retentionMicros: Long = retentionMs * 1000L
}

object WindowStoreSettings {

  /** The settings of the query whose task creates the provider (Spark's StateStoreConf carries
   *  only its own stateStore.* keys). */
  def current(): WindowStoreSettings = WindowStoreSettings(
    ConfResolver.get(SluiceConf.WindowStoreName),
    ConfResolver.get(SluiceConf.WindowStoreRetention),
    ConfResolver.get(SluiceConf.WindowStoreSnapshotInterval))

  def apply(settings: Iterable[(String, String)]): WindowStoreSettings = {
    val conf = SluiceConf(settings)
    WindowStoreSettings(
      conf.get(SluiceConf.WindowStoreName),
      conf.get(SluiceConf.WindowStoreRetention),
      conf.get(SluiceConf.WindowStoreSnapshotInterval))
  }
}
