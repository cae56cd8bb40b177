package sluice

import java.io.{ByteArrayInputStream, DataInputStream, File}
import java.nio.file.Files
import java.util.zip.ZipFile

import scala.jdk.CollectionConverters._

import org.scalatest.funsuite.AnyFunSuite

/**
 * The package layering of ARCHITECTURE.md, checked on the compiled classes: every class name a
 * class file refers to (its constant pool's class entries and type descriptors) is mapped to its
 * layer, and a class may refer only to its own layer and the ones below it. A feature's
 * `…internal` package belongs to the feature's layer.
 */
class LayeringSuite extends AnyFunSuite {
  import LayeringSuite._

  private lazy val classes: Map[String, Array[Byte]] = {
    val root = new File(classOf[sluice.conf.SluiceConf].getProtectionDomain.getCodeSource.getLocation.toURI)
    if (root.isDirectory) {
      Files.walk(root.toPath).iterator().asScala.filter(_.toString.endsWith(".class")).map { p =>
        root.toPath.relativize(p).toString.replace(File.separatorChar, '/').stripSuffix(".class") -> Files.readAllBytes(
          p)
      }.toMap
    } else {
      val zip = new ZipFile(root)
      try zip.entries().asScala.filter(_.getName.endsWith(".class")).map { e =>
          e.getName.stripSuffix(".class") -> zip.getInputStream(e).readAllBytes()
        }.toMap
      finally zip.close()
    }
  }

  /** Layer of each sluice class -> layers of the sluice classes it refers to. */
  private lazy val edges: Seq[(String, String, String)] = classes.toSeq.flatMap { case (name, bytes) =>
    layerOf(name).toSeq.flatMap { from =>
      referencedClasses(bytes).flatMap(c => layerOf(c).map(to => (from, to, s"$name -> $c")))
    }
  }

  test("the class files of every layer were found") {
    val found = classes.keys.flatMap(layerOf).toSet
    assert(found == Layers.toSet, s"layers with classes: $found")
  }

  test("the scan sees references between layers") {
    val pairs = edges.map(e => (e._1, e._2)).toSet
    assert(Set(("cache", "suppress"), ("suppress", Bridge), ("plugin", "cache"), ("inspect", "windowstore"),
        ("inspect", "suppress"), ("inspect", "cache"), ("suppress", "state"), ("state", Bridge)).subsetOf(pairs), pairs)
  }

  test("no layer refers to a layer above it (so the packages have no cycle)") {
    assert(violations(edges).isEmpty, violations(edges).mkString("\n"))
  }

  test("the bridge refers to no sluice package and holds only its declared adapters") {
    val fromBridge = edges.collect { case (Bridge, to, why) if to != Bridge => why }
    assert(fromBridge.isEmpty, fromBridge.mkString("\n"))
    val bridgeClasses = classes.keys.filter(n => layerOf(n).contains(Bridge))
      .map(n => n.split('/').last.takeWhile(_ != '$')).toSet
    assert(bridgeClasses == BridgeAdapters, s"the bridge's classes differ from its declared adapters")
  }

  test("every layer is either a feature, with its user API declared, or one of the shared layers") {
    assert((UserApi.keySet & SharedLayers.keySet).isEmpty)
    assert(UserApi.keySet ++ SharedLayers.keySet == Layers.toSet,
      "a layer missing from UserApi (a feature) or SharedLayers (the shared layers below or around the features)")
  }

  test("a feature package holds only its user API at its top level, the rest in its internal package") {
    for ((feature, api) <- UserApi) {
      val problems = outsideUserApi(classes.keys, feature, api)
      assert(problems.isEmpty, problems.mkString("\n"))
    }
  }

  test("the user API check finds a class at a feature's top level, a missing one, another subpackage") {
    val names = Seq("sluice/cache/CachingStateStoreProvider", "sluice/cache/CachingStateStoreProvider$",
      "sluice/cache/internal/RecordCache", "sluice/cache/internal/RecordCache$Entry")
    assert(outsideUserApi(names, "cache", Set("CachingStateStoreProvider")).isEmpty)
    assert(outsideUserApi(names :+ "sluice/cache/Helper", "cache", Set("CachingStateStoreProvider")).nonEmpty)
    assert(outsideUserApi(names, "cache", Set("CachingStateStoreProvider", "Gone")).nonEmpty)
    assert(outsideUserApi(names :+ "sluice/cache/util/Helper", "cache", Set("CachingStateStoreProvider")).nonEmpty)
  }

  test("feature code names Spark's internals only through the seam") {
    // Read on the sources, not the class files: feature code names Spark's internal classes by the
    // seam's aliases (sluice.spark.StateStoreTypes, PlanTypes, ...), which the compiler erases, so
    // a class file cannot tell an alias from a direct import. What matters for the next Spark is the
    // source: a class Spark moves or a signature it changes is then edited in the seam only.
    val root = new File(sys.props.getOrElse("sluice.mainSources", "jvm/src/main"))
    assert(new File(root, "scala/sluice/conf").isDirectory, s"main sources not found at $root")
    val offenders = for {
      file <- Files.walk(root.toPath).iterator().asScala.map(_.toFile).filter(_.getName.endsWith(".scala")).toSeq
      rel = root.toPath.relativize(file.toPath).toString.replace(File.separatorChar, '/')
      if !SeamSourceDirs.exists(d => rel.matches(d))
      (line, n) <- Files.readAllLines(file.toPath).asScala.zipWithIndex
      hit <- SparkInternalName.findFirstIn(line.replaceAll("//.*", ""))
    } yield s"$rel:${n + 1}: $hit"
    assert(offenders.isEmpty,
      "Spark internals named outside the seam (sluice.spark) and the bridge:\n" +
        offenders.mkString("\n"))
  }

  test("the source check finds an internal name") {
    Seq("import org.apache.spark.sql.execution.SparkPlan", "SQLConf.get", "org.apache.spark.sql.classic.SparkSession",
      "import org.apache.spark.sql.connect.planner.SparkConnectPlanner").foreach { l =>
      assert(SparkInternalName.findFirstIn(l).nonEmpty, l)
    }
    Seq("import org.apache.spark.sql.connector.read.Scan", "import sluice.spark.PlanTypes.SparkPlan").foreach { l =>
      assert(SparkInternalName.findFirstIn(l).isEmpty, l)
    }
  }

  test("the checker finds a reference upwards and a cycle") {
    assert(violations(Seq(("cache", "plugin", "up"))).nonEmpty)
    assert(violations(Seq(("suppress", "cache", "a"), ("cache", "suppress", "b"))).nonEmpty)
    assert(violations(Seq(("cache", "suppress", "down"), ("cache", "conf", "down"))).isEmpty)
    val desc =
      "(Lsluice/cache/internal/RecordCache;[Lorg/apache/spark/sql/sluice/MinMetric;)Lscala/Option<Lsluice/suppress/internal/SuppressNode;>;"
    assert(classNamesIn(desc).toSet == Set("sluice/cache/internal/RecordCache", "org/apache/spark/sql/sluice/MinMetric",
      "sluice/suppress/internal/SuppressNode"))
  }
}

object LayeringSuite {
  val Bridge = "bridge"
  val BridgePackage = "org/apache/spark/sql/sluice"

  /** The bridge's part in Spark's Kafka connector, whose reader parts are private to its package. */
  val KafkaBridgePackage = "org/apache/spark/sql/kafka010/sluice"

  /** Lowest first: each layer may use only those before it. */
  val Layers: Seq[String] =
    Seq("conf", "spark", Bridge, "state", "windowstore", "suppress", "sessions", "cache", "input", "json", "slicing",
      "aggregate", "inspect", "connect", "plugin", "testing")

  /**
   * The bridge's classes: each adapts a Spark API that is `private[sql]` or `private[spark]`, or (in
   * [[KafkaBridgePackage]]) `private[kafka010]`.
   */
  val BridgeAdapters: Set[String] = Set("StatefulOperatorSupport", "SluiceStatefulNode", "StreamContext",
    "SluiceStateStoreExec", "MinMetric", "AverageStoreMetric", "CombinedMetric", "CombinedCustomMetric",
    "SizeOperatorMetric",
    "DatasetAccess", "DirectReads", "DirectReaderFactory", "DirectReader", "RealTimeReads",
    "DrivenQueries", "DrivenSource", "DrivenClock", "DrivenSink", "BatchFiles")

  /** Where Spark's internals may be named: the seam (shared and per-minor folders) and the bridge. */
  val SeamSourceDirs: Seq[String] = Seq("scala/sluice/spark/.*", "spark-[^/]+/sluice/spark/.*",
    "scala/org/apache/spark/sql/sluice/.*", "(?:scala|spark-[^/]+)/org/apache/spark/sql/kafka010/sluice/.*")

  /** A Spark internal named in source: `sql.execution`, `sql.classic`, `sql.connect` (not the public
   *  `sql.connector`), `SQLConf`. */
  val SparkInternalName =
    """org\.apache\.spark\.sql\.(?:execution|classic|connect)\b(?!or)[\w.{}]*|\bSQLConf\b""".r

  /**
   * Every feature package's top level: the classes users name (in code, in a Spark setting, from
   * Python through py4j, in the documentation) or that confs and checkpoints record by class name.
   * Everything else of a feature is in `sluice.<feature>.internal`, so a class added at a feature's
   * top level fails the check until it is declared here as user API.
   */
  val UserApi: Map[String, Set[String]] = Map(
    // spark.sql.streaming.stateStore.providerClass, recorded in offset logs; Stores (Kafka Streams'
    // factory) and the supplier it returns; WindowStoreSettings, read from Python's sluice.inspect
    "windowstore" -> Set("InMemoryWindowStoreProvider", "Stores", "InMemoryWindowStoreSupplier", "WindowStoreSettings"),
    "suppress" -> Set("Suppress", "Suppressed", "UntilWindowCloses", "UntilTimeLimit", "UntilWallClockTimeLimit",
      "BufferConfig", "StrictBufferConfig", "EagerBufferConfig", "BufferFullStrategy", "BufferFullException",
      "SuppressUsageException", "LateRecords"),
    "sessions" -> Set(),
    // spark.sql.streaming.stateStore.providerClass, recorded in offset logs
    "cache" -> Set("CachingStateStoreProvider"),
    // users name only its source option and settings, which are strings
    "input" -> Set(),
    "json" -> Set(),
    "slicing" -> Set(),
    "aggregate" -> Set(),
    // read from Python's sluice.inspect
    "inspect" -> Set("StateInspector"),
    // spark.connect.extensions.relation.classes; the message's schema, documented for clients
    "connect" -> Set("SuppressRelationPlugin", "SuppressRelation"),
    // Scala users' and Python's sluice.testing
    "testing" -> Set("PipelineDriver"))

  /** The layers that are no feature, so have no `internal` package, and why. */
  val SharedLayers: Map[String, String] = Map(
    "conf" -> "every setting, read by every layer",
    "spark" -> "the seam: Spark's internals in sluice's terms, for every layer",
    Bridge -> "Spark's private[sql] and private[spark] APIs, for every layer",
    "state" -> ("what the stores and operators of several features share (keyed rows, side stores, store " +
      "files, file formats, sidecars, index caches): a layer below the features, none of which owns it; " +
      "LocalCheckpointFileManager is set by class name in spark.sql.streaming.checkpointFileManagerClass"),
    "plugin" -> ("what a SparkSession installs, above every feature: SluicePlugin and SluiceExtensions, named " +
      "in spark.plugins and spark.sql.extensions, and the checks they install"))

  def layerOf(className: String): Option[String] = {
    val pkg = className.split('/').dropRight(1).toList
    pkg match {
      case List("org", "apache", "spark", "sql", "sluice") | List("org", "apache", "spark", "sql", "kafka010",
            "sluice") =>
        Some(Bridge)
      case "sluice" :: feature :: rest if Layers.contains(feature) && (rest == Nil || rest == List("internal")) =>
        Some(feature)
      case _ => None
    }
  }

  /**
   * What breaks a feature's split among these class files: a class at its top level that is not
   * declared user API, declared user API not found, a class in a subpackage other than `internal`.
   */
  def outsideUserApi(classNames: Iterable[String], feature: String, api: Set[String]): Seq[String] = {
    val pkg = s"sluice/$feature/"
    val inFeature = classNames.filter(_.startsWith(pkg)).map(_.stripPrefix(pkg))
    val top = inFeature.filterNot(_.contains('/')).map(_.takeWhile(_ != '$')).toSet
    (top -- api).toSeq.sorted.map(c => s"sluice.$feature.$c is not user API: it belongs in sluice.$feature.internal") ++
      (api -- top).toSeq.sorted.map(c => s"sluice.$feature.$c, declared user API, is not found") ++
      inFeature.filter(n => n.contains('/') && !n.matches("internal/[^/]+")).toSeq.sorted
        .map(n => s"sluice/$feature/$n is in a package besides sluice.$feature.internal")
  }

  def violations(edges: Seq[(String, String, String)]): Seq[String] = edges.collect {
    case (from, to, why) if Layers.indexOf(to) > Layers.indexOf(from) => s"$from uses $to above it: $why"
  }

  private val ClassInDescriptor = """(?:^|[\[(;)<>]L?|^L)((?:org/apache/spark/sql/(?:kafka010/)?)?sluice/[\w/$]+)""".r

  def classNamesIn(s: String): Seq[String] = ClassInDescriptor.findAllMatchIn(s).map(_.group(1)).toSeq

  /** The sluice class names in a class file's constant pool (class entries and descriptors). */
  def referencedClasses(bytes: Array[Byte]): Seq[String] = constantStrings(bytes).flatMap(classNamesIn).distinct

  /** The UTF-8 entries of a class file's constant pool. */
  private def constantStrings(bytes: Array[Byte]): Seq[String] = {
    val in = new DataInputStream(new ByteArrayInputStream(bytes))
    require(in.readInt() == 0xcafebabe, "not a class file")
    in.readUnsignedShort(); in.readUnsignedShort()
    val count = in.readUnsignedShort()
    val strings = Seq.newBuilder[String]
    var i = 1
    while (i < count) {
      in.readUnsignedByte() match {
        case 1 => strings += in.readUTF()
        case 3 | 4 | 9 | 10 | 11 | 12 | 17 | 18 => in.skipBytes(4)
        case 5 | 6 => in.skipBytes(8); i += 1 // takes two entries
        case 7 | 8 | 16 | 19 | 20 => in.skipBytes(2)
        case 15 => in.skipBytes(3)
        case tag => throw new IllegalStateException(s"constant pool tag $tag")
      }
      i += 1
    }
    strings.result()
  }
}
