package sluice.spark

/**
 * How Spark asks a provider to open a writable store, beyond version and checkpoint id.
 * spark-4.1: Spark passes neither flag (both false). spark-4.2 and later: `getStore` carries them.
 *
 * @param forceSnapshotOnCommit the commit must leave a full snapshot of the version
 * @param loadEmpty the store starts empty at the version, without loading earlier data
 */
final case class OpenOptions(forceSnapshotOnCommit: Boolean = false, loadEmpty: Boolean = false)

object OpenOptions {
  val Default: OpenOptions = OpenOptions()
}
