package sluice.spark

/**
 * Which part of a provider's background maintenance Spark asks for. Spark 4.1 and 4.2 ask for all
 * of it at once (`doMaintenance`); 4.3 may ask for snapshots and cleanup separately.
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
