package sluice.cache.internal

import java.util.Collections

import org.apache.spark.sql.catalyst.expressions.UnsafeRow

import sluice.spark.StateStoreTypes.{KeyStateEncoderSpec, NoPrefixKeyStateEncoderSpec, PrefixKeyScanStateEncoderSpec}

/**
 * What a caching provider's stores were told of each column family: only families of one value
 * per key are cached, and write-behind rows are laid over the delegate's only where the family's
 * key encoder says how (an unordered scan, or a prefix scan).
 */
private[sluice] final class ColumnFamilies {
  // Column families known to hold one value per key: only those are cached.
  private val singleValueFamilies = Collections.synchronizedSet(new java.util.HashSet[String]())
  // Key encoders by column family: iterators merge logged rows only where no order is promised.
  private val encoders = new java.util.concurrent.ConcurrentHashMap[String, KeyStateEncoderSpec]()

  def isCached(colFamily: String): Boolean = singleValueFamilies.contains(colFamily)

  /** A column family the stores were told of: only single-value families are cached. */
  def learn(colFamily: String, spec: KeyStateEncoderSpec, multipleValues: Boolean): Unit = {
    encoders.put(colFamily, spec)
    if (multipleValues) singleValueFamilies.remove(colFamily) else singleValueFamilies.add(colFamily)
  }

  /** The family was removed: nothing of it is cached from now on. */
  def removed(colFamily: String): Unit = singleValueFamilies.remove(colFamily)

  /** Whether `key` starts with `prefix` under the family's prefix encoder (read stores only). */
  def prefixMatcher(prefix: UnsafeRow, colFamily: String): UnsafeRow => Boolean =
    encoders.get(colFamily) match {
      case PrefixKeyScanStateEncoderSpec(keySchema, n) =>
        val types = keySchema.fields.take(n).map(_.dataType)
        (k: UnsafeRow) =>
          types.indices.forall { i =>
            prefix.isNullAt(i) == k.isNullAt(i) && (k.isNullAt(i) || prefix.get(i, types(i)) == k.get(i, types(i)))
          }
      case other => throw new UnsupportedOperationException(s"sluice write-behind cache: prefix scan of column " +
          s"family '$colFamily' with key encoder $other while rows written since the delegate's last commit " +
          "are held in the write-behind log; read this version after the next delegate commit")
    }

  def unordered(colFamily: String): Boolean = encoders.get(colFamily) match {
    case _: NoPrefixKeyStateEncoderSpec => true
    case _ => false
  }
}
