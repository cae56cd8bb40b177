package sluice.state.conformance

import java.io.File
import java.util.UUID

import scala.collection.mutable
import scala.util.Random

import org.apache.hadoop.conf.Configuration
import org.scalactic.source.Position
import org.scalatest.{BeforeAndAfter, Tag}

import org.apache.spark.sql.execution.streaming.runtime.StreamExecution
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.sluicetest.SparkTestAccess
import org.apache.spark.sql.test.SharedSparkSession
import org.apache.spark.sql.types.StructType

/**
 * Spark's provider conformance suite (`StateStoreSuiteBase`, from Spark's published test-jar, run
 * unmodified) against one sluice provider configuration. A subclass names the provider and the
 * tests of the base suite that cannot apply to it, each with the reason ([[exclusions]]); those
 * are registered as ignored. Everything else is set up as Spark's own HDFS-backed and RocksDB
 * suites set up theirs.
 */
abstract class SluiceConformanceSuite[P <: StateStoreProvider]
  extends StateStoreSuiteBase[P] with SharedSparkSession with BeforeAndAfter {
  import StateStoreTestsHelper._

  /**
   * Name of a test of the base suite -> why it cannot apply to this provider. A name matches the
   * test of that name and every variant the base suite derives from it (per codec and column
   * family setting). Defined in the subclass's companion object: the base suite registers its
   * tests while it is constructed.
   */
  protected def exclusions: Seq[(String, String)]

  /** A new, uninitialized provider of this configuration. */
  protected def newProvider(): P

  /** Whether the provider is given column families when a test asks for them. Spark's HDFS
   *  suite never gives them to its provider (unsupported there); nor do the suites of sluice
   *  configurations that cannot hold them. */
  protected def columnFamilies: Boolean

  /** The SQL conf a provider is created with when a test gives none. */
  protected def sqlConfForNewProvider(): SQLConf

  private lazy val matched = mutable.LinkedHashSet[String]()

  private def exclusionOf(testName: String): Option[(String, String)] =
    exclusions.find { case (name, _) => testName == name || testName.startsWith(name + " - with codec ") }

  override protected def test(testName: String, testTags: Tag*)(testFun: => Any)(implicit pos: Position): Unit =
    exclusionOf(testName) match {
      case Some((name, _)) => matched += name; ignore(testName, testTags: _*)(testFun)
      case None if SluiceConformanceSuite.namesCodecByClass(testName) => ()
      case None => super.test(testName, testTags: _*)(linked(testFun))
    }

  /** A test whose test-jar classes cannot link against this runtime (a Spark signature changed since
   *  the jar was built) fails as that test, named; ScalaTest would take the LinkageError as fatal
   *  and abort the suite with every later test unrun. */
  private def linked(testFun: => Any): Any =
    try testFun
    catch {
      case e: LinkageError =>
        throw new IllegalStateException(
          s"the test-jar's code cannot link on Spark ${org.apache.spark.SPARK_VERSION}: $e", e)
    }

  // QueryTest (of SharedSparkSession) has one too; the base suite's is the one it is written for.
  override protected def testQuietly(name: String)(f: => Unit): Unit = super[StateStoreSuiteBase].testQuietly(name)(f)

  before {
    StateStore.stop()
    require(!StateStore.isMaintenanceRunning)
    SparkTestAccess.startCoordinator(spark)
  }

  after {
    StateStore.stop()
    require(!StateStore.isMaintenanceRunning)
  }

  def newStoreProvider(
      storeId: StateStoreId,
      keyStateEncoderSpec: KeyStateEncoderSpec = NoPrefixKeyStateEncoderSpec(keySchema),
      keySchema: StructType = keySchema,
      sqlConf: Option[SQLConf] = None,
      hadoopConf: Configuration = new Configuration,
      useColumnFamilies: Boolean = false): P = {
    hadoopConf.set(StreamExecution.RUN_ID_KEY, UUID.randomUUID().toString)
    val provider = newProvider()
    provider.init(storeId, keySchema, valueSchema, keyStateEncoderSpec, useColumnFamilies && columnFamilies,
      new StateStoreConf(sqlConf.getOrElse(sqlConfForNewProvider())), hadoopConf, useMultipleValuesPerKey = false,
      stateSchemaProvider = Some(new TestStateSchemaProvider))
    provider
  }

  private def randomId(): StateStoreId = StateStoreId(newDir(), Random.nextInt(), 0)

  override def newStoreProvider(): P = newStoreProvider(randomId())

  override def newStoreProvider(storeId: StateStoreId): P =
    newStoreProvider(storeId, NoPrefixKeyStateEncoderSpec(keySchema))

  override def newStoreProvider(storeId: StateStoreId, useColumnFamilies: Boolean): P =
    newStoreProvider(storeId, NoPrefixKeyStateEncoderSpec(keySchema), useColumnFamilies = useColumnFamilies)

  override def newStoreProvider(storeId: StateStoreId, conf: Configuration): P =
    newStoreProvider(storeId, NoPrefixKeyStateEncoderSpec(keySchema), hadoopConf = conf)

  override def newStoreProvider(minDeltasForSnapshot: Int, numOfVersToRetainInMemory: Int): P =
    newStoreProvider(randomId(), NoPrefixKeyStateEncoderSpec(keySchema),
      sqlConf = Some(getDefaultSQLConf(minDeltasForSnapshot, numOfVersToRetainInMemory)))

  override def newStoreProvider(keySchema: StructType, keyStateEncoderSpec: KeyStateEncoderSpec,
      useColumnFamilies: Boolean): P =
    newStoreProvider(randomId(), keyStateEncoderSpec, keySchema, useColumnFamilies = useColumnFamilies)

  override def newStoreProvider(useColumnFamilies: Boolean): P =
    newStoreProvider(randomId(), NoPrefixKeyStateEncoderSpec(keySchema), useColumnFamilies = useColumnFamilies)

  override def newStoreProviderWithClonedConf(storeId: StateStoreId): P =
    newStoreProvider(storeId, NoPrefixKeyStateEncoderSpec(keySchema), sqlConf = Some(cloneSQLConf()))

  override def newStoreProviderNoInit(): P = newProvider()

  override def getLatestData(storeProvider: P, useColumnFamilies: Boolean): Set[((String, Int), Int)] =
    getData(storeProvider, -1, useColumnFamilies)

  /** Reads a version through a new provider of the same store; -1: the latest committed version. */
  override def getData(provider: P, version: Int, useColumnFamilies: Boolean): Set[((String, Int), Int)] =
    tryWithProviderResource(newStoreProvider(provider.stateStoreId, useColumnFamilies)) { reloaded =>
      val store = reloaded.getStore(if (version < 0) latestVersion(provider.stateStoreId) else version)
      try store.iterator().map(rowPairToDataPair).toSet
      finally if (!store.hasCommitted) store.abort()
    }

  /**
   * The latest version committed in the store's checkpoint directory (0 when none), read from its
   * file names: the delegates' (`N.delta`, `N.snapshot`, `N.changelog`, `N.zip`), the window
   * store's (`N.wdelta`, `N.wsnapshot`) and the write-behind log's (`_sluice_writebehind/N.wb`).
   * sluice's providers, unlike Spark's, have no API for it.
   */
  protected def latestVersion(id: StateStoreId): Long = {
    val dir = new File(id.storeCheckpointLocation().toUri.getPath)
    val Versioned = """(\d+)\.(delta|snapshot|changelog|zip|wdelta|wsnapshot|wb)""".r
    def versions(d: File): Seq[Long] = Option(d.listFiles()).toSeq.flatten.flatMap { f =>
      f.getName match {
        case Versioned(v, _) if f.isFile => Seq(v.toLong)
        case "_sluice_writebehind" if f.isDirectory => versions(f)
        case _ => Nil
      }
    }
    (0L +: versions(dir)).max
  }

  test("conformance: every excluded test is a test of the base suite") {
    val unknown = exclusions.map(_._1).filterNot(matched.contains)
    assert(unknown.isEmpty, s"exclusions naming no test of StateStoreSuiteBase: $unknown")
  }
}

/**
 * Set up as Spark's HDFS-backed store suite sets its provider up: one column family of one value
 * per key, and its SQL conf.
 */
trait HdfsStyleSetup[P <: StateStoreProvider] extends SluiceConformanceSuite[P] {
  override protected def columnFamilies: Boolean = false
  override protected def sqlConfForNewProvider(): SQLConf = getDefaultSQLConf(
    SQLConf.STATE_STORE_MIN_DELTAS_FOR_SNAPSHOT.defaultValue.get,
    SQLConf.MAX_BATCHES_TO_RETAIN_IN_MEMORY.defaultValue.get)
  override def getDefaultSQLConf(minDeltasForSnapshot: Int, numOfVersToRetainInMemory: Int): SQLConf =
    SluiceConformanceSuite.hdfsStyleSQLConf(minDeltasForSnapshot, numOfVersToRetainInMemory)
}

/** Set up as Spark's RocksDB store suite sets its provider up: column families, the session's SQL conf. */
trait RocksDBStyleSetup[P <: StateStoreProvider] extends SluiceConformanceSuite[P] {
  override protected def columnFamilies: Boolean = true
  override protected def sqlConfForNewProvider(): SQLConf = SQLConf.get
  override def getDefaultSQLConf(minDeltasForSnapshot: Int, numOfVersToRetainInMemory: Int): SQLConf =
    SluiceConformanceSuite.rocksDBStyleSQLConf(minDeltasForSnapshot)
}

/** SQL confs as Spark's own provider suites build them. */
object SluiceConformanceSuite {

  /**
   * Whether a test of the base suite is its per-codec variant with the codec named by class
   * (`- with codec org.apache.spark.io.LZ4CompressionCodec`). The base suite runs each codec test
   * twice, by short name and by class name; `CompressionCodec.createCodec` maps the short name to
   * that same class before a provider sees it, so the second run checks nothing the first did not.
   * Not registered: a third of the base suite's tests, and of the suites' time, on every minor.
   */
  def namesCodecByClass(testName: String): Boolean = testName.contains(" - with codec org.apache.spark.io.")

  /** As Spark's HDFS-backed store suite (StateStoreSuite) does. */
  def hdfsStyleSQLConf(minDeltasForSnapshot: Int, numOfVersToRetainInMemory: Int): SQLConf = {
    val sqlConf = new SQLConf()
    sqlConf.setConf(SQLConf.STATE_STORE_MIN_DELTAS_FOR_SNAPSHOT, minDeltasForSnapshot)
    sqlConf.setConf(SQLConf.MAX_BATCHES_TO_RETAIN_IN_MEMORY, numOfVersToRetainInMemory)
    sqlConf.setConf(SQLConf.MIN_BATCHES_TO_RETAIN, 2)
    sqlConf.setConf(SQLConf.STATE_STORE_COMPRESSION_CODEC, SQLConf.get.stateStoreCompressionCodec)
    sqlConf.setConf(SQLConf.STREAMING_CHECKPOINT_FILE_CHECKSUM_ENABLED, SQLConf.get.checkpointFileChecksumEnabled)
    ConformanceShim.carryRowChecksum(sqlConf)
    sqlConf
  }

  /** As Spark's RocksDB store suite does. */
  def rocksDBStyleSQLConf(minDeltasForSnapshot: Int): SQLConf = {
    val sqlConf = SQLConf.get.clone()
    sqlConf.setConfString(SQLConf.STATE_STORE_MIN_DELTAS_FOR_SNAPSHOT.key, minDeltasForSnapshot.toString)
    sqlConf
  }
}
