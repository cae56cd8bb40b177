// One project: Scala sources under jvm/, Spark as a provided dependency (the pyspark wheel
// pinned in pyproject.toml carries the same Spark and Scala at run time).
val sparkVersion = "4.1.3"
val kafkaStreamsVersion = "4.1.1"

ThisBuild / organization := "io.sluice"
ThisBuild / version := "0.1.0"
ThisBuild / scalaVersion := "2.13.17"

lazy val root = (project in file("."))
  .settings(
    name := "sluice",
    description := "Kafka Streams' state and emission controls for Spark Structured Streaming",
    versionScheme := Some("early-semver"),
    Compile / scalaSource := baseDirectory.value / "jvm" / "src" / "main" / "scala",
    Compile / resourceDirectory := baseDirectory.value / "jvm" / "src" / "main" / "resources",
    Test / scalaSource := baseDirectory.value / "jvm" / "src" / "test" / "scala",
    Test / resourceDirectory := baseDirectory.value / "jvm" / "src" / "test" / "resources",
    target := baseDirectory.value / "jvm" / "target",
    javacOptions ++= Seq("--release", "17"),
    scalacOptions ++= Seq("-release", "17", "-deprecation", "-feature", "-Wunused:imports"),
    // Everything sluice runs with is on a Spark installation's class path already (Scala included),
    // so the published POM marks it all provided and `spark-submit --packages` fetches only sluice.
    autoScalaLibrary := false,
    libraryDependencies ++= Seq(
      "org.scala-lang" % "scala-library" % scalaVersion.value % Provided,
      "org.apache.spark" %% "spark-core" % sparkVersion % Provided,
      "org.apache.spark" %% "spark-sql" % sparkVersion % Provided,
      "org.apache.spark" %% "spark-catalyst" % sparkVersion % Provided,
      ("org.apache.spark" %% "spark-sql-kafka-0-10" % sparkVersion % Provided).intransitive(),
      // The Spark Connect server (sluice.connect's relation plugin). Its jar is the shaded one that
      // ships in pyspark (protobuf under org.sparkproject.connect.protobuf, the connect protos
      // inside); its POM lists modules (pipelines, mllib, ...) that the plugin does not need.
      ("org.apache.spark" %% "spark-connect" % sparkVersion % Provided).intransitive(),
      // The client the connector above runs with; sluice.input samples record sizes with it.
      ("org.apache.kafka" % "kafka-clients" % "3.9.1" % Provided).intransitive(),
      "org.scalatest" %% "scalatest" % "3.2.19" % Test,
      // The differential test against Kafka Streams (KafkaStreamsConformanceSuite). Streams 4.x needs
      // the kafka-clients of its own version, so the test classpath gets 4.1.1 in place of the 3.9.1
      // above; the connector's classes that sluice.input's suites load work with either.
      "org.apache.kafka" % "kafka-streams" % kafkaStreamsVersion % Test,
      "org.apache.kafka" % "kafka-streams-test-utils" % kafkaStreamsVersion % Test,
      "org.apache.kafka" % "kafka-clients" % kafkaStreamsVersion % Test
    ),
    // The jar the Python package bundles: a stable name, no Scala/version suffix.
    Compile / packageBin / artifactPath := target.value / "sluice.jar",
    // Published as io.sluice:sluice_2.13 (dev/publish-maven): jar, sources and POM.
    Compile / packageDoc / publishArtifact := false,
    pomIncludeRepository := (_ => false),
    Test / fork := true,
    Test / javaOptions ++= Seq(
      "-Xmx2g",
      "--add-opens=java.base/java.lang=ALL-UNNAMED",
      "--add-opens=java.base/java.nio=ALL-UNNAMED",
      "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
      "--add-opens=java.base/java.util=ALL-UNNAMED",
      "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
      "--add-opens=java.base/java.lang.invoke=ALL-UNNAMED"
    ),
    Test / parallelExecution := false
  )
