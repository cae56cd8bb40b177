package sluice

import java.io.{ByteArrayInputStream, DataInputStream, File}
import java.nio.charset.StandardCharsets
import java.nio.file.Files
import java.util.zip.ZipFile

import scala.jdk.CollectionConverters._

import org.scalatest.funsuite.AnyFunSuite

/**
 * The package map of ARCHITECTURE.md, checked on the compiled classes: every class name a class
 * file refers to (its constant pool's class entries and type descriptors) is mapped to its layer,
 * and a class may refer only to its own layer and the layers its layer may use ([[LayeringSuite.MayUse]]).
 * A feature's `…internal` package belongs to the feature's layer.
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
    assert(found == MayUse.keySet, s"layers with classes: $found")
  }

  test("every reference between layers is an edge MayUse allows") {
    assert(violations(edges, MayUse).isEmpty, violations(edges, MayUse).mkString("\n"))
  }

  test("every edge MayUse allows is used by some class (the map says only what the code does)") {
    assert(unused(edges, MayUse).isEmpty, unused(edges, MayUse).mkString("\n"))
  }

  test("the allowed edges have no cycle, and only known layers") {
    assert(cycle(MayUse).isEmpty, s"a cycle: ${cycle(MayUse).getOrElse(Nil).mkString(" -> ")}")
    assert(MayUse.values.flatten.toSet.subsetOf(MayUse.keySet))
  }

  test("a shared layer uses no feature") {
    val up = SharedLayers.keys.flatMap(l => (MayUse(l) -- SharedLayers.keySet).map(f => s"$l uses the feature $f"))
    assert(up.isEmpty, up.mkString("\n"))
  }

  test("ARCHITECTURE.md's package map, its table and its drawing, is MayUse") {
    val doc = new String(Files.readAllBytes(architectureDoc.toPath), StandardCharsets.UTF_8)
    val (table, drawing) = documentedMap(doc)
    def show(uses: Option[Set[String]]) =
      uses.fold("no row")(u => if (u.isEmpty) "none" else u.toSeq.sorted.mkString(", "))
    def diff(what: String, m: Map[String, Set[String]]): Seq[String] =
      (MayUse.keySet ++ m.keySet).toSeq.sorted.filter(l => MayUse.get(l) != m.get(l))
        .map(l => s"$l: MayUse ${show(MayUse.get(l))}; ARCHITECTURE.md's $what ${show(m.get(l))}")
    val differences = diff("table", table) ++ diff("drawing", drawing)
    if (differences.nonEmpty) fail(s"\"$MapHeading\" differs from MayUse:\n" + differences.mkString("\n"))
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
    assert(UserApi.keySet ++ SharedLayers.keySet == MayUse.keySet,
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

  test("feature code builds no Spark plan node, operator or state class itself: the seam's shims do") {
    // A constructor, companion factory or copy of a class of SparkBuiltPackages, called from a class
    // outside the seam and the bridge: a field Spark changes in a minor would break feature code.
    val found = classes.toSeq.filter { case (name, _) => name.startsWith("sluice/") && !name.startsWith(SeamPackage) }
      .flatMap { case (name, bytes) => sparkConstructions(bytes).map(m => s"$name -> $m") }.sorted
    assert(found.isEmpty,
      "Spark classes built outside the seam (add a shim to sluice.spark.SparkNodes or the seam's type objects):\n" +
        found.mkString("\n"))
  }

  test("the construction check finds Spark's constructors, copies and factories in class files, not base classes") {
    // The seam's shims make the calls the check above refuses elsewhere.
    val shims = sparkConstructions(classes(SeamPackage + "SparkNodes$"))
    Seq("org/apache/spark/sql/execution/ProjectExec.<init>",
      "org/apache/spark/sql/catalyst/plans/logical/Project.<init>",
      "StateStoreSaveExec.copy", "StateStoreRestoreExec.copy").foreach(c =>
      assert(shims.exists(_.startsWith(c)) || shims.exists(_.contains(c)), s"$c not found in $shims"))
    // A sluice node calls its Spark base's no-argument constructor only.
    assert(sparkConstructions(classes("sluice/cache/internal/EmitCacheSkippedExec")).isEmpty)
    val exec = "org/apache/spark/sql/execution/ProjectExec"
    assert(isConstruction(exec, "<init>",
        "(Lscala/collection/immutable/Seq;Lorg/apache/spark/sql/execution/SparkPlan;)V"))
    assert(!isConstruction("org/apache/spark/sql/execution/SparkPlan", "<init>", "()V"))
    assert(isConstruction(exec, "copy", s"(Lscala/collection/immutable/Seq;)L$exec;"))
    assert(!isConstruction("org/apache/spark/sql/execution/metric/SQLMetric", "copy",
        "()Lorg/apache/spark/sql/execution/metric/SQLMetric;"))
    assert(isConstruction(exec + "$", "apply", s"(Lscala/collection/immutable/Seq;)L$exec;"))
    assert(!isConstruction("org/apache/spark/sql/execution/SparkStrategies$StatefulAggregationStrategy$", "apply",
        "(Lorg/apache/spark/sql/catalyst/plans/logical/LogicalPlan;)Lscala/collection/immutable/Seq;"))
    assert(!isConstruction("org/apache/spark/sql/catalyst/expressions/Alias", "<init>", "(I)V"))
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

  test("the checker finds an edge not allowed, an allowed edge not used, a cycle") {
    val map = Map("a" -> Set("b", "c"), "b" -> Set("c"), "c" -> Set.empty[String])
    assert(violations(Seq(("a", "b", "x"), ("b", "c", "x"), ("c", "c", "x")), map).isEmpty)
    assert(violations(Seq(("c", "a", "sluice/c/C -> sluice/a/A")), map) ==
      Seq("c uses a, which MayUse does not allow: sluice/c/C -> sluice/a/A"))
    assert(unused(Seq(("a", "b", "x"), ("b", "c", "x")), map) == Seq("MayUse allows a -> c, which no class uses"))
    assert(cycle(map).isEmpty)
    assert(cycle(map + ("c" -> Set("a"))).map(_.toSet).contains(Set("a", "b", "c")))
    assert(cycle(map + ("c" -> Set("c"))).contains(Seq("c", "c")))
    val desc =
      "(Lsluice/cache/internal/RecordCache;[Lorg/apache/spark/sql/sluice/MinMetric;)Lscala/Option<Lsluice/suppress/internal/SuppressNode;>;"
    assert(classNamesIn(desc).toSet == Set("sluice/cache/internal/RecordCache", "org/apache/spark/sql/sluice/MinMetric",
      "sluice/suppress/internal/SuppressNode"))
  }

  test("the documented map is read from its table and its drawing, the rest of the file ignored") {
    val doc = s"""## Before
                 || package | may use |
                 ||---|---|
                 || `x` | `y` |
                 |
                 |$MapHeading
                 |
                 || package | may use | why |
                 ||---|---|---|
                 || `a` (the first) | `b`, `c` | a reason naming `Other` |
                 || `b` | `c` | |
                 || `c` | none | |
                 |
                 |```mermaid
                 |graph TD
                 |  a --> b & c
                 |  b --> c
                 |```
                 |
                 |### After
                 |```mermaid
                 |graph TD
                 |  x --> y
                 |```
                 |""".stripMargin
    val expected = Map("a" -> Set("b", "c"), "b" -> Set("c"), "c" -> Set.empty[String])
    assert(documentedMap(doc) == (expected, expected))
    assert(documentedMap(doc.replace("  b --> c\n", "  b --> c\n  c\n")) == (expected, expected))
    assert(documentedMap(doc.replace("  b --> c\n", ""))._2 == Map("a" -> Set("b", "c"), "b" -> Set(), "c" -> Set()))
    assert(intercept[IllegalArgumentException](documentedMap(doc.replace("b --> c", "b -.-> c"))).getMessage
        .contains("b -.-> c"))
    assert(intercept[IllegalArgumentException](documentedMap(doc.replace(MapHeading, "### Gone"))).getMessage
        .contains(MapHeading))
  }
}

object LayeringSuite {
  val Bridge = "bridge"
  val BridgePackage = "org/apache/spark/sql/sluice"

  /**
   * Each layer -> the layers its classes may refer to besides its own: every edge a class uses and no
   * other, with no cycle. A shared layer uses no feature; an edge from a feature to another feature
   * says why in its comment. ARCHITECTURE.md's package map (a table and its drawing) is this map.
   */
  val MayUse: Map[String, Set[String]] = Map(
    "conf" -> Set(),
    "spark" -> Set("conf"),
    Bridge -> Set(),
    "rewrites" -> Set(),
    "state" -> Set("conf", "spark", Bridge),
    "windowstore" -> Set("conf", "spark", Bridge, "state"),
    "suppress" -> Set("conf", "spark", Bridge, "state"),
    // suppress: rewrites the suppress right above a session aggregation (retractions, fused final results)
    "sessions" -> Set("conf", "spark", Bridge, "state", "suppress"),
    // windowstore: the record cache over a window store, the emission cache's rows kept in one;
    // suppress, sessions: the emission cache's rule tells the operator below the sink by its node
    "cache" -> Set("conf", "spark", Bridge, "state", "windowstore", "suppress", "sessions"),
    "input" -> Set("conf", "spark", Bridge, "state"),
    "json" -> Set("conf", "spark", "rewrites"),
    // what remains of window slicing: the refusal of a checkpoint written with sliced state (removed)
    "slicing" -> Set("conf", Bridge, "state"),
    // windowstore, suppress, cache: reads each feature's state layout in a checkpoint
    "inspect" -> Set("spark", "state", "windowstore", "suppress", "cache"),
    // suppress: Spark Connect's form of suppress, built with suppress's user API and planner
    "connect" -> Set("conf", "spark", "suppress"),
    // every feature but inspect, connect and testing: installs their rules, strategies and checks, and
    // refuses at start what their state store providers would
    "plugin" -> Set("conf", "spark", Bridge, "windowstore", "suppress", "sessions", "cache", "input", "json",
      "slicing"),
    "testing" -> Set(Bridge))

  /** The heading of ARCHITECTURE.md's section holding the package map. */
  val MapHeading = "### Which package may use which"

  /** ARCHITECTURE.md, in the repository's root: the nearest folder holding it from the working directory up. */
  def architectureDoc: File = {
    val start = new File(sys.props("user.dir")).getAbsoluteFile
    Iterator.iterate(start)(_.getParentFile).takeWhile(_ != null).map(new File(_, "ARCHITECTURE.md"))
      .find(_.isFile).getOrElse(throw new IllegalStateException(s"no ARCHITECTURE.md in $start or above"))
  }

  private val DocName = """`(\w+)`""".r
  private val DrawnLine = """(\w+)(?:\s*-->\s*(\w+(?:\s*&\s*\w+)*))?""".r

  /**
   * The package map of a document's section headed [[MapHeading]]: from its table's rows ("| `layer` |
   * `used`, `used` | ..."), and from its Mermaid drawing's lines ("layer --> used & used", or a
   * layer alone). A drawing line of another form fails, so the drawing holds no edge read past.
   */
  def documentedMap(doc: String): (Map[String, Set[String]], Map[String, Set[String]]) = {
    val lines = doc.linesIterator.toSeq
    val start = lines.indexOf(MapHeading)
    require(start >= 0, s"no section \"$MapHeading\"")
    val section = lines.drop(start + 1).takeWhile(!_.startsWith("#"))
    val table = section.filter(_.startsWith("|")).map(_.split('|').map(_.trim).toSeq).collect {
      case _ +: layer +: used +: _ if DocName.findFirstMatchIn(layer).nonEmpty =>
        DocName.findFirstMatchIn(layer).get.group(1) -> DocName.findAllMatchIn(used).map(_.group(1)).toSet
    }
    require(table.map(_._1).distinct.size == table.size, "a layer in two rows of the table")
    val drawn = section.dropWhile(_.trim != "```mermaid").drop(1).takeWhile(_.trim != "```")
      .map(_.trim).filter(l => l.nonEmpty && !l.startsWith("graph ") && !l.startsWith("%%"))
      .map {
        case DrawnLine(from, null) => from -> Set.empty[String]
        case DrawnLine(from, to) => from -> to.split('&').map(_.trim).toSet
        case other => throw new IllegalArgumentException(s"a drawing line not of the form \"a --> b & c\": $other")
      }
    val drawing = drawn.groupMapReduce(_._1)(_._2)(_ ++ _)
    (table.toMap, drawing ++ drawn.flatMap(_._2).filterNot(drawing.contains).map(_ -> Set.empty[String]))
  }

  /** The bridge's classes: each adapts a Spark API that is `private[sql]` or `private[spark]`. */
  val BridgeAdapters: Set[String] = Set("StatefulOperatorSupport", "SluiceStatefulNode", "StreamContext",
    "SluiceStateStoreExec", "MinMetric", "AverageStoreMetric", "CombinedMetric",
    "CombinedCustomMetric",
    "SizeOperatorMetric",
    "ProgressRows", "RealTimeProgress",
    "DatasetAccess",
    "DrivenQueries", "DrivenSource", "DrivenClock", "DrivenSink", "BatchFiles", "DelegatedReplay", "ReplayedChanges",
    "ProgressCopy")

  /** The seam's package, in class file form. */
  val SeamPackage = "sluice/spark/"

  /**
   * The packages whose classes only the seam and the bridge build (ARCHITECTURE.md, "What feature code
   * builds of Spark's"): Spark's physical operators, streaming runtime and state store classes, its
   * logical plan nodes and streaming relations.
   */
  val SparkBuiltPackages: Seq[String] = Seq("org/apache/spark/sql/execution/", "org/apache/spark/sql/catalyst/plans/",
    "org/apache/spark/sql/catalyst/streaming/")

  /**
   * Whether a call of `owner.name` with descriptor `desc` builds an instance of a class of
   * [[SparkBuiltPackages]]: a constructor with parameters (a subclass's call of its Spark base's
   * no-argument constructor carries no field a minor changes), a `copy` with parameters, or a
   * companion's `apply` returning its class.
   */
  def isConstruction(owner: String, name: String, desc: String): Boolean =
    SparkBuiltPackages.exists(owner.startsWith) && (name match {
      case "<init>" => desc != "()V"
      case "copy" => !desc.startsWith("()")
      case "apply" => owner.endsWith("$") && desc.endsWith(s")L${owner.stripSuffix("$")};")
      case _ => false
    })

  /** The calls of a class file that build a class of [[SparkBuiltPackages]] (its constant pool's method references). */
  def sparkConstructions(bytes: Array[Byte]): Seq[String] =
    methodRefs(bytes).collect { case (owner, name, desc) if isConstruction(owner, name, desc) => s"$owner.$name$desc" }
      .distinct

  /** Where Spark's internals may be named: the seam (shared and per-minor folders) and the bridge. */
  val SeamSourceDirs: Seq[String] = Seq("scala/sluice/spark/.*", "spark-[^/]+/sluice/spark/.*",
    "scala/org/apache/spark/sql/sluice/.*", "spark-[^/]+/org/apache/spark/sql/sluice/.*")

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
    // read from Python's sluice.inspect
    "inspect" -> Set("StateInspector"),
    // spark.connect.extensions.relation.classes; the message's schema, documented for clients
    "connect" -> Set("SuppressRelationPlugin", "SuppressRelation"),
    // spark.plugins and spark.sql.extensions
    "plugin" -> Set("SluicePlugin", "SluiceExtensions"),
    // Scala users' and Python's sluice.testing
    "testing" -> Set("PipelineDriver"))

  /** The layers that are no feature, so have no `internal` package, and why. */
  val SharedLayers: Map[String, String] = Map(
    "conf" -> "every setting, read by every layer",
    "spark" -> "the seam: Spark's internals in sluice's terms, for every layer",
    Bridge -> "Spark's private[sql] and private[spark] APIs, for every layer",
    "rewrites" -> ("what an experimental rewrite (json's plan rule) reports: why it left a plan alone, logged " +
      "once per query run"),
    "state" -> ("what the stores and operators of several features share (keyed rows and their grouping " +
      "columns, side stores, store files, file formats, sidecars, index caches): a layer below the features, " +
      "none of which owns it"))

  def layerOf(className: String): Option[String] = {
    val pkg = className.split('/').dropRight(1).toList
    pkg match {
      case List("org", "apache", "spark", "sql", "sluice") =>
        Some(Bridge)
      case "sluice" :: feature :: rest if MayUse.contains(feature) && (rest == Nil || rest == List("internal")) =>
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

  /** The references between layers that `mayUse` does not allow, each with the class reference. */
  def violations(edges: Seq[(String, String, String)], mayUse: Map[String, Set[String]]): Seq[String] =
    edges.collect {
      case (from, to, why) if from != to && !mayUse.getOrElse(from, Set.empty).contains(to) =>
        s"$from uses $to, which MayUse does not allow: $why"
    }.sorted

  /** The edges `mayUse` allows that no reference uses. */
  def unused(edges: Seq[(String, String, String)], mayUse: Map[String, Set[String]]): Seq[String] = {
    val used = edges.map(e => (e._1, e._2)).toSet
    (for ((from, tos) <- mayUse.toSeq; to <- tos if !used((from, to)))
      yield s"MayUse allows $from -> $to, which no class uses").sorted
  }

  /** A cycle of `mayUse`'s edges, from a layer back to it, if any. */
  def cycle(mayUse: Map[String, Set[String]]): Option[Seq[String]] = {
    val acyclic = scala.collection.mutable.Set.empty[String]
    def from(path: List[String]): Option[Seq[String]] =
      if (acyclic(path.head)) None
      else {
        val found = mayUse.getOrElse(path.head, Set.empty).toSeq.sorted.iterator.map { next =>
          if (path.contains(next)) Some(next +: path.takeWhile(_ != next).reverse :+ next) else from(next :: path)
        }.collectFirst { case Some(c) => c }
        if (found.isEmpty) acyclic += path.head
        found
      }
    mayUse.keys.toSeq.sorted.iterator.map(l => from(List(l))).collectFirst { case Some(c) => c }
  }

  private val ClassInDescriptor = """(?:^|[\[(;)<>]L?|^L)((?:org/apache/spark/sql/)?sluice/[\w/$]+)""".r

  def classNamesIn(s: String): Seq[String] = ClassInDescriptor.findAllMatchIn(s).map(_.group(1)).toSeq

  /** The sluice class names in a class file's constant pool (class entries and descriptors). */
  def referencedClasses(bytes: Array[Byte]): Seq[String] = constantStrings(bytes).flatMap(classNamesIn).distinct

  /** The UTF-8 entries of a class file's constant pool. */
  private def constantStrings(bytes: Array[Byte]): Seq[String] = constantPool(bytes).collect { case s: String => s }

  /** The method references of a class file's constant pool: (owner class, name, descriptor). */
  private def methodRefs(bytes: Array[Byte]): Seq[(String, String, String)] = {
    val pool = constantPool(bytes)
    def utf(i: Int) = pool(i).asInstanceOf[String]
    pool.collect { case MemberRef(cls, nat) =>
      val (name, desc) = pool(nat) match { case NameAndType(n, d) => (utf(n), utf(d)); case _ => ("", "") }
      (pool(cls) match { case ClassRef(n) => utf(n); case _ => "" }, name, desc)
    }.toSeq
  }

  private final case class ClassRef(name: Int)
  private final case class MemberRef(cls: Int, nameAndType: Int)
  private final case class NameAndType(name: Int, desc: Int)

  /** A class file's constant pool by index: UTF-8 strings, class, method and name-and-type entries; null elsewhere. */
  private def constantPool(bytes: Array[Byte]): IndexedSeq[Any] = {
    val in = new DataInputStream(new ByteArrayInputStream(bytes))
    require(in.readInt() == 0xcafebabe, "not a class file")
    in.readUnsignedShort(); in.readUnsignedShort()
    val count = in.readUnsignedShort()
    val pool = new Array[Any](count)
    var i = 1
    while (i < count) {
      in.readUnsignedByte() match {
        case 1 => pool(i) = in.readUTF()
        case 7 => pool(i) = ClassRef(in.readUnsignedShort())
        case 10 | 11 => pool(i) = MemberRef(in.readUnsignedShort(), in.readUnsignedShort())
        case 12 => pool(i) = NameAndType(in.readUnsignedShort(), in.readUnsignedShort())
        case 3 | 4 | 9 | 17 | 18 => in.skipBytes(4)
        case 5 | 6 => in.skipBytes(8); i += 1 // takes two entries
        case 8 | 16 | 19 | 20 => in.skipBytes(2)
        case 15 => in.skipBytes(3)
        case tag => throw new IllegalStateException(s"constant pool tag $tag")
      }
      i += 1
    }
    pool.toIndexedSeq
  }
}
