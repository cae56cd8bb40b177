package sluice.spark

import org.apache.spark.SPARK_VERSION
import org.scalatest.funsuite.AnyFunSuite

class SparkVersionsSuite extends AnyFunSuite {
  test("the jar is built for the Spark it is tested on, one of the supported minors") {
    assert(SparkVersions.minorOf(SPARK_VERSION) == SparkShim.sparkMinor)
    assert(SparkVersions.supported == Seq("4.1", "4.2", "4.3"))
    assert(SparkVersions.refusal(SPARK_VERSION).isEmpty)
  }

  test("another supported minor is refused naming both versions and the jar to use") {
    assert(SparkVersions.refusal("4.2.1", built = "4.3").contains(
        "This sluice jar is built for Spark 4.3, but Spark 4.2.1 is running: use sluice-spark-4.2.jar " +
          "(supported Spark versions: 4.1, 4.2, 4.3)"))
  }

  test("an unsupported Spark is refused naming it and the supported versions") {
    for (v <- Seq("3.5.1", "4.0.0", "4.4.0-SNAPSHOT", "5.0.0")) {
      assert(SparkVersions.refusal(v, built = "4.3").contains(
          s"Spark $v is not supported by sluice: supported Spark versions are 4.1, 4.2, 4.3"), v)
    }
    assert(SparkVersions.minorOf("4.3.0-SNAPSHOT") == "4.3")
  }
}
