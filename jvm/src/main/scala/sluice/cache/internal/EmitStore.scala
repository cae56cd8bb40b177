package sluice.cache.internal

import org.apache.spark.sql.catalyst.expressions.UnsafeRow

/** The rows the emission cache keeps durably: one per key (get/put/remove/scan of one partition). */
private[sluice] trait EmitStore {
  /** The held value of `key`, or null. */
  def get(key: UnsafeRow): UnsafeRow
  def put(key: UnsafeRow, value: UnsafeRow): Unit
  def remove(key: UnsafeRow): Unit
  def iterator(): Iterator[(UnsafeRow, UnsafeRow)]
}
