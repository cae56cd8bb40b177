package sluice.spark

/**
 * Which part of a provider's background maintenance Spark asks for. spark-4.1, spark-4.2: all of it
 * at once (`doMaintenance`). spark-4.3: snapshots and cleanup may also be asked for separately.
 */
sealed trait Maintenance {
  def snapshots: Boolean
  def cleanup: Boolean
}

object Maintenance {
  case object All extends Maintenance { val snapshots = true; val cleanup = true }
  case object Snapshot extends Maintenance { val snapshots = true; val cleanup = false }
  case object Cleanup extends Maintenance { val snapshots = false; val cleanup = true }
}
