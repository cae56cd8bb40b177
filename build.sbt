// One source tree, one sbt project per supported Spark minor (conf.json's "spark" section is the
// list): `spark41`, `spark42`, `spark43`. Each compiles jvm/src/main/scala plus its own
// jvm/src/main/spark-<minor>/ (the seam: only what differs between Spark versions) against the jars
// of that minor's pyspark distribution (dev/spark-jars fetches them), and packages
// sluice-spark-<minor>.jar, published as io.sluice:sluice-spark-<minor>_2.13.
import sjsonnew.support.scalajson.unsafe.{Parser => JsonParser}
import sjsonnew.shaded.scalajson.ast.unsafe.{JObject, JString, JValue}
import scala.sys.process._

val kafkaStreamsVersion = "4.1.1"

// Spark's published test-jars (StateStoreSuiteBase, for sluice.state.conformance; Spark's query-level
// suites for dev/spark-suites), per minor. Maven Central has none for 4.3, so 4.3 runs 4.2.0's: Spark's
// 4.2 contract on the 4.3 runtime (what 4.3 cannot link is excluded, by name, in its ConformanceShim).
// The minor's pyspark jars stay its main classpath.
val sparkTestJars = Map("4.1" -> "4.1.3", "4.2" -> "4.2.0", "4.3" -> "4.2.0")

ThisBuild / organization := "io.sluice"
// The release version is written once, in VERSION (pyproject.toml reads it too).
ThisBuild / version := IO.read(file("VERSION")).trim
ThisBuild / licenses := Seq("Apache-2.0" -> url("https://www.apache.org/licenses/LICENSE-2.0.txt"))

/** conf.json's spark.supported: minor -> field -> value. */
lazy val sparkLines: Map[String, Map[String, String]] = {
  val text = IO.read(file("jvm/src/main/resources/sluice/conf.json"))
  def fields(v: JValue): Map[String, JValue] = v match {
    case JObject(fs) => fs.map(f => f.field -> f.value).toMap
    case other => sys.error(s"conf.json: expected an object, found $other")
  }
  val supported = fields(fields(fields(JsonParser.parseUnsafe(text))("spark"))("supported"))
  supported.map { case (minor, line) =>
    minor -> fields(line).collect { case (k, JString(s)) => k -> s }
  }
}

/** "4.2" as (4, 2), for comparing minors. */
def minorKey(minor: String): (Int, Int) = minor.split('.') match { case Array(a, b) => (a.toInt, b.toInt) }

/**
 * The folders `spark-<from>+` and `spark-<from>-<to>` under `dir` whose range includes `minor` (what
 * several minors share: spark-4.2+ serves 4.2 and every later minor, spark-4.1-4.2 the two minors
 * before 4.3), so a difference is written once, from the minor that brought it.
 */
def rangeFolders(dir: File, minor: String): Seq[File] = {
  val From = """spark-(\d+\.\d+)\+""".r
  val Between = """spark-(\d+\.\d+)-(\d+\.\d+)""".r
  val le = Ordering[(Int, Int)].lteq _
  Option(dir.listFiles()).toSeq.flatten.collect {
    case f @ (_: File) if f.isDirectory && (f.getName match {
          case From(from) => le(minorKey(from), minorKey(minor))
          case Between(from, to) => le(minorKey(from), minorKey(minor)) && le(minorKey(minor), minorKey(to))
          case _ => false
        }) => f
  }.sortBy(_.getName)
}

// dev/test-jvm-options: the options of the JVMs tests start (why: that file).
lazy val testJvmOptions: Seq[String] =
  IO.readLines(file("dev/test-jvm-options")).filterNot(_.startsWith("#")).flatMap(_.trim.split("\\s+")).filter(
    _.nonEmpty)

def sparkLine(minor: String): Project = {
  val line = sparkLines(minor)
  val id = "spark" + minor.replace(".", "")
  Project(id, file("jvm") / "target" / s"spark-$minor")
    .settings(
      name := s"sluice-spark-$minor",
      moduleName := s"sluice-spark-$minor", // io.sluice:sluice-spark-4.3_2.13 (sbt would write 4-3)
      description := s"Kafka Streams' state and emission controls for Spark $minor Structured Streaming",
      versionScheme := Some("early-semver"),
      scalaVersion := line("scala"),
      Compile / unmanagedSourceDirectories := {
        val main = (ThisBuild / baseDirectory).value / "jvm" / "src" / "main"
        Seq(main / "scala", main / s"spark-$minor") ++ rangeFolders(main, minor)
      },
      Compile / unmanagedResourceDirectories :=
        Seq((ThisBuild / baseDirectory).value / "jvm" / "src" / "main" / "resources"),
      Test / unmanagedSourceDirectories := {
        val test = (ThisBuild / baseDirectory).value / "jvm" / "src" / "test"
        Seq(test / "scala", test / "java") ++ Seq(test / s"spark-$minor").filter(_.isDirectory) ++
          rangeFolders(test, minor) ++
          // What needs Spark's test-jars and is the same for every minor that has them.
          sparkTestJars.get(minor).map(_ => test / "spark-testjars").toSeq
      },
      // dev/spark-suites' probe: only meaningful with the system properties that route sets.
      Test / testOptions += Tests.Filter(n => !n.endsWith(".SessionDefaultsProbe")),
      Test / unmanagedResourceDirectories :=
        Seq((ThisBuild / baseDirectory).value / "jvm" / "src" / "test" / "resources"),
      target := (ThisBuild / baseDirectory).value / "jvm" / "target" / s"spark-$minor",
      javacOptions ++= Seq("--release", "17"),
      scalacOptions ++= Seq("-release", "17", "-deprecation", "-feature", "-Wunused:imports"),
      // Spark, its Scala and everything else it ships come from the pyspark distribution of this
      // minor (unmanaged, so the published POM lists none of it and `--packages` fetches only
      // sluice); Scala itself is the managed one of the same version, for the compiler.
      autoScalaLibrary := false,
      Compile / unmanagedJars := {
        val root = (ThisBuild / baseDirectory).value
        val dir = file(Seq((root / "dev" / "spark-jars").getPath, minor).!!.trim)
        (dir * "*.jar").get
          .filterNot(f =>
            f.getName.startsWith("scala-library-") || f.getName.startsWith("scala-reflect-") ||
            f.getName.startsWith("scala-compiler-"))
          .map(Attributed.blank)
      },
      libraryDependencies ++= Seq(
        "org.scala-lang" % "scala-library" % scalaVersion.value % Provided,
        ("org.apache.spark" %% "spark-sql-kafka-0-10" % line("kafka_connector") % Provided).intransitive(),
        // The client the connector above runs with; sluice.input samples record sizes with it.
        ("org.apache.kafka" % "kafka-clients" % line("kafka_clients") % Provided).intransitive(),
        "org.scalatest" %% "scalatest" % "3.2.19" % Test,
        // The differential test against Kafka Streams (KafkaStreamsConformanceSuite). Streams 4.x needs
        // the kafka-clients of its own version, so the test classpath gets it in place of the one
        // above; the connector's classes that sluice.input's suites load work with either.
        "org.apache.kafka" % "kafka-streams" % kafkaStreamsVersion % Test,
        "org.apache.kafka" % "kafka-streams-test-utils" % kafkaStreamsVersion % Test,
        "org.apache.kafka" % "kafka-clients" % kafkaStreamsVersion % Test
      ) ++ sparkTestJars.get(minor).toSeq.flatMap { v =>
        Seq("spark-core", "spark-catalyst", "spark-sql").map(m =>
          ("org.apache.spark" %% m % v % Test classifier "tests").intransitive()) ++ Seq(
          // What those suites use at run time, at the versions of Spark's parent pom.
          ("org.scalatestplus" %% "scalacheck-1-18" % "3.2.19.0" % Test).intransitive(),
          "org.scalacheck" %% "scalacheck" % "1.18.0" % Test)
      },
      Compile / packageBin / artifactPath := target.value / s"sluice-spark-$minor.jar",
      Compile / packageDoc / publishArtifact := false,
      pomIncludeRepository := (_ => false),
      Test / fork := true,
      Test / javaOptions ++= testJvmOptions ++ Seq(
        "-Xmx2g",
        "--add-opens=java.base/java.lang=ALL-UNNAMED",
        "--add-opens=java.base/java.nio=ALL-UNNAMED",
        "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
        "--add-opens=java.base/java.util=ALL-UNNAMED",
        "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
        "--add-opens=java.base/java.lang.invoke=ALL-UNNAMED",
        // LayeringSuite reads the main sources (type aliases leave no trace in class files).
        s"-Dsluice.mainSources=${(ThisBuild / baseDirectory).value / "jvm" / "src" / "main"}"
      ),
      // Two test JVMs at once: KafkaStreamsConformanceSuite (most of the time) in one, every other
      // suite in the other. Either alone leaves part of the two cores idle while its queries wait on
      // micro-batches. parallelExecution lets the groups run together; suites within a JVM still run
      // one at a time (testForkedParallel is off: they share the JVM's SparkContext).
      Test / parallelExecution := true,
      Test / testGrouping := {
        val (conformance, rest) = (Test / definedTests).value.partition(_.name == ConformanceSuite)
        val fork = Tests.SubProcess((Test / forkOptions).value)
        Seq("conformance" -> conformance, "suites" -> rest).collect {
          case (name, tests) if tests.nonEmpty => Tests.Group(name, tests, fork)
        }
      },
      // Spark's test mode: Spark checks its own contracts (analyzer rules use resolveOperators*, ...)
      // only when it is on, so sluice's rules are checked on every test run.
      Test / envVars := Map("SPARK_TESTING" -> "1")
    )
}

lazy val ConformanceSuite = "sluice.suppress.KafkaStreamsConformanceSuite"
// sbt's default restrictions, but two forked test groups at once (testGrouping above).
Global / concurrentRestrictions := Seq(
  Tags.limitAll(java.lang.Runtime.getRuntime.availableProcessors.max(2)),
  Tags.limit(Tags.ForkedTestGroup, 2),
  Tags.exclusiveGroup(Tags.Clean))

lazy val spark41 = sparkLine("4.1")
lazy val spark42 = sparkLine("4.2")
lazy val spark43 = sparkLine("4.3")

// Nothing is built at the root: name the minor (`spark43/test`) or use dev/build-jar / dev/test.
lazy val root = (project in file("."))
  .settings(publish / skip := true, Compile / sources := Nil, Test / sources := Nil)
