// One project: Scala sources under jvm/, Spark as a provided dependency (the pyspark wheel
// pinned in pyproject.toml carries the same Spark and Scala at run time).
val sparkVersion = "4.1.3"

ThisBuild / organization := "io.sluice"
ThisBuild / version := "0.1.0"
ThisBuild / scalaVersion := "2.13.17"

lazy val root = (project in file("."))
  .settings(
    name := "sluice",
    Compile / scalaSource := baseDirectory.value / "jvm" / "src" / "main" / "scala",
    Compile / resourceDirectory := baseDirectory.value / "jvm" / "src" / "main" / "resources",
    Test / scalaSource := baseDirectory.value / "jvm" / "src" / "test" / "scala",
    Test / resourceDirectory := baseDirectory.value / "jvm" / "src" / "test" / "resources",
    target := baseDirectory.value / "jvm" / "target",
    javacOptions ++= Seq("--release", "17"),
    scalacOptions ++= Seq("-release", "17", "-deprecation", "-feature", "-Wunused:imports"),
    libraryDependencies ++= Seq(
      "org.apache.spark" %% "spark-core" % sparkVersion % Provided,
      "org.apache.spark" %% "spark-sql" % sparkVersion % Provided,
      "org.apache.spark" %% "spark-catalyst" % sparkVersion % Provided,
      ("org.apache.spark" %% "spark-sql-kafka-0-10" % sparkVersion % Provided).intransitive(),
      // The client the connector above runs with; sluice.input samples record sizes with it.
      ("org.apache.kafka" % "kafka-clients" % "3.9.1" % Provided).intransitive(),
      "org.scalatest" %% "scalatest" % "3.2.19" % Test
    ),
    // The jar the Python package bundles: a stable name, no Scala/version suffix.
    Compile / packageBin / artifactPath := target.value / "sluice.jar",
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
