package sluice.cache.internal

import sluice.spark.StateStoreTypes.StateStoreCustomMetric

/** What one store (one batch of one partition) did with the cache, reported as its metrics. */
private[sluice] final class StoreCounters {
  import CacheMetrics._
  var hits, misses, evictions, flushes, delegateWrites, delegateReads, delegateCommits = 0L
  var logRows = 0L // rows in the version's write-behind file
  var sizeBytes = 0L // this store's rows in its slot cache, at commit

  def metrics: Map[StateStoreCustomMetric, Long] = {
    val ratio: Map[StateStoreCustomMetric, Long] =
      if (hits + misses == 0) Map.empty else Map(HitRatio -> hits * 100 / (hits + misses))
    ratio ++ Map(
      Hits -> hits,
      Misses -> misses,
      SizeBytes -> sizeBytes,
      Evictions -> evictions,
      Flushes -> flushes,
      DelegateWrites -> delegateWrites,
      DelegateReads -> delegateReads,
      DelegateCommits -> delegateCommits,
      WriteBehindRows -> logRows)
  }
}
