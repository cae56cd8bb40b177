package sluice.windowstore.internal

import scala.collection.mutable

import org.apache.hadoop.conf.Configuration

import org.apache.spark.sql.types.StructType

import sluice.spark.StateStoreTypes.{NoPrefixKeyStateEncoderSpec, StateStoreConf, StateStoreId}
import sluice.windowstore.{InMemoryWindowStoreProvider, WindowStoreSettings}

/**
 * A read-only view of one window store's committed version, for `sluice.inspect`: a provider of
 * its own, opened with the settings the query ran with (its retention decides what loading the
 * version expires), so what it shows is what the query's store would hold at that version.
 */
private[sluice] final class WindowStoreView(
    id: StateStoreId,
    keySchema: StructType,
    valueSchema: StructType,
    storeConf: StateStoreConf,
    hadoopConf: Configuration,
    val settings: WindowStoreSettings)
  extends AutoCloseable {

  private val provider = new InMemoryWindowStoreProvider(Some(settings))
  provider.init(id, keySchema, valueSchema, NoPrefixKeyStateEncoderSpec(keySchema), useColumnFamilies = false,
    storeConf, hadoopConf, useMultipleValuesPerKey = false, stateSchemaProvider = None)

  /**
   * The entries of `version` by segment: (window start in microseconds, entries), window starts
   * ascending, window-less entries under [[WindowStoreView.NoWindow]]; and the store's stream
   * time after `version` (microseconds, [[WindowStoreView.NoWindow]] before any windowed put).
   */
  def segments(version: Long): (Seq[(Long, Long)], Long) = {
    val store = provider.getReadStore(version, None)
    try {
      val map = provider.liveMap
      val counts = mutable.TreeMap.empty[Long, Long]
      store.iterator().foreach { p =>
        val start = map.windowStartOf(p.key)
        counts(start) = counts.getOrElse(start, 0L) + 1
      }
      (counts.toSeq, map.streamTime)
    } finally store.release()
  }

  override def close(): Unit = provider.close()
}

private[sluice] object WindowStoreView {

  /** Segment key of window-less entries and the stream time of a store without windowed puts. */
  val NoWindow: Long = SegmentedStateMap.NoWindow
}
