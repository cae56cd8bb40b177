package sluice.cache.internal

import org.apache.spark.sql.sluice.AverageStoreMetric

import sluice.spark.StateStoreTypes.{StateStoreCustomMetric, StateStoreCustomSizeMetric, StateStoreCustomSumMetric}

/** The record cache's operator metrics (`customMetrics` of every operator whose stores it serves). */
private[sluice] object CacheMetrics {
  val Hits = StateStoreCustomSumMetric("cacheHits", "reads served by the sluice record cache")
  val Misses = StateStoreCustomSumMetric("cacheMisses", "reads the sluice record cache passed to the delegate store")
  val HitRatio: StateStoreCustomMetric = AverageStoreMetric("cacheHitRatio",
    "percentage of reads served by the sluice record cache, averaged over the state stores")
  val SizeBytes = StateStoreCustomSizeMetric("cacheSizeBytes", "bytes held by the sluice record cache")
  val Evictions = StateStoreCustomSumMetric("cacheEvictions", "entries evicted from the sluice record cache")
  val Flushes = StateStoreCustomSumMetric("cacheFlushes", "flushes of dirty entries into the delegate store")
  val DelegateWrites = StateStoreCustomSumMetric("delegateWrites", "puts and removes that reached the delegate store")
  val DelegateReads = StateStoreCustomSumMetric("delegateReads", "point reads that reached the delegate store")
  val DelegateCommits = StateStoreCustomSumMetric("delegateCommits", "commits of the delegate store")
  // A row count (summed over partitions), shown as a number, not as a size.
  val WriteBehindRows = StateStoreCustomSumMetric("writeBehindRows",
    "rows changed since the delegate's last commit, held in the write-behind log")

  val All: Seq[StateStoreCustomMetric] = Seq(Hits, Misses, HitRatio, SizeBytes, Evictions, Flushes,
    DelegateWrites, DelegateReads, DelegateCommits, WriteBehindRows)
}
