package sluice.spark

import scala.jdk.CollectionConverters._

import sluice.conf.SluiceConf

/**
 * The Spark versions sluice supports (conf.json's "spark" section, which the build, the scripts and
 * the Python package read too) and the check that this jar runs on the Spark it was built for.
 */
object SparkVersions {
  private def section = SluiceConf.spec.get("spark")

  /** The supported minors, oldest first ("4.1", "4.2", ...). */
  val supported: Seq[String] = section.get("supported").fieldNames().asScala.toSeq

  /** "4.3" of "4.3.0" (or of "4.3.0-SNAPSHOT"). */
  def minorOf(version: String): String = version.split("[.-]").take(2).mkString(".")

  /** The name of the jar built for `minor`. */
  def jarName(minor: String): String = section.get("jar").asText().replace("{minor}", minor)

  /**
   * Why this jar cannot run on Spark `running`, or None: it was compiled against Spark's internal
   * APIs of one minor (`SparkShim.sparkMinor`), which change between minors.
   */
  def refusal(running: String, built: String = SparkShim.sparkMinor): Option[String] = {
    val minor = minorOf(running)
    val list = supported.mkString(", ")
    if (minor == built) None
    else if (!supported.contains(minor)) {
      Some(section.get("unsupported").asText().replace("{found}", running).replace("{supported}", list))
    } else {
      Some(section.get("wrong_jar").asText().replace("{built}", built).replace("{found}", running)
          .replace("{jar}", jarName(minor)).replace("{supported}", list))
    }
  }
}
