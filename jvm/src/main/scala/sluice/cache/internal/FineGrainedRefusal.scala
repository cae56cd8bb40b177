package sluice.cache.internal

/** Why Spark's state data source cannot read a record cache store's changes per batch. */
private[cache] object FineGrainedRefusal {
  def writeBehind(option: String, dir: String): String =
    s"Spark's state data source option $option cannot read a record cache store that has used write-behind " +
      s"($dir exists): its delegate holds several batches' changes in one version. Read the state of a batch " +
      "with format(\"statestore\") and batchId instead (write-behind rows included)"

  def delegate(option: String, delegateClass: String): String =
    s"Spark's state data source option $option needs a delegate that replays versions " +
      s"(SupportsFineGrainedReplay); the record cache's delegate $delegateClass does not"
}
