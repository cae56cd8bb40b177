package sluice.spark

/**
 * How Spark asks a provider to open a writable store, beyond version and checkpoint id. Spark 4.1
 * passes neither flag (both false); from 4.2 `getStore` carries them.
 *
 * @param forceSnapshotOnCommit the commit must leave a full snapshot of the version
 * @param loadEmpty the store starts empty at the version, without loading earlier data
 */
final case class OpenOptions(forceSnapshotOnCommit: Boolean = false, loadEmpty: Boolean = false)

object OpenOptions {
  val Default: OpenOptions = OpenOptions()
}
