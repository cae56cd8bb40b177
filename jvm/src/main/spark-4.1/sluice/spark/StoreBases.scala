package sluice.spark

import org.apache.spark.sql.execution.streaming.state.{KeyStateEncoderSpec, ReadStateStore, StateStore}

/**
 * The parts of Spark's store traits that differ between minors, so that sluice's stores implement
 * one fixed set of members on every Spark.
 *
 * spark-4.1: `ReadStateStore` and `StateStore` have nothing beyond what sluice's stores implement themselves.
 */

/**
 * A store wrapping another (the record cache): what it does not serve itself is answered by the
 * wrapped store that `passThrough` returns.
 */
trait ForwardingReadStore extends ReadStateStore {

  /**
   * The wrapped store, ready to answer a read of `colFamilyName` that this store does not serve:
   * every write made through this store so far must be visible in it.
   */
  protected[sluice] def passThrough(colFamilyName: String): ReadStateStore

  /** A column family was registered on the wrapped store (spark-4.3 and later: `registerColFamily`). */
  protected[sluice] def registered(colFamilyName: String, keyStateEncoderSpec: KeyStateEncoderSpec,
      useMultipleValuesPerKey: Boolean): Unit

}

/** The writable form of [[ForwardingReadStore]]. */
trait ForwardingStore extends StateStore with ForwardingReadStore {

  /**
   * The wrapped writable store, ready for a write this store does not serve (a range delete) on
   * `colFamilyName`: nothing this store still holds of that family may be read afterwards.
   */
  protected def passThroughWrite(colFamilyName: String): StateStore

}

/** A store with one column family of one value per key (the window store). */
trait SingleFamilyReadStore extends ReadStateStore {

  /** The provider's name in Spark's unsupported-operation errors. */
  protected def providerName: String

}
