package sluice.cache.internal

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{
  BoundReference, GenericInternalRow, JoinedRow, UnsafeProjection, UnsafeRow
}
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter
import org.apache.spark.sql.types.{BinaryType, LongType, StructField, StructType}

/**
 * State layout of the emission cache: key = the aggregation's grouping columns; value = the latest
 * output row, the batch time its key entered the cache, and an update sequence number (its LRU order).
 */
private[sluice] final class EmitCacheLayout(val keySchema: StructType, rowSchema: StructType) extends Serializable {

  /**
   * The store's key: the grouping key's UnsafeRow bytes in one binary column. The bytes are the
   * same equality as the key itself, and no store sees a window column it could act on.
   */
  val storeKeySchema: StructType = StructType(Seq(StructField("__sluice_emit_key", BinaryType, nullable = false)))
  val valueSchema: StructType = StructType(rowSchema.fields ++ Seq(
    StructField("__sluice_emit_insert_ms", LongType, nullable = false),
    StructField("__sluice_emit_seq", LongType, nullable = false)))
  private val width = rowSchema.length

  @transient private lazy val encodeProj = UnsafeProjection.create(valueSchema)
  @transient private lazy val decodeProj = UnsafeProjection.create(
    rowSchema.fields.zipWithIndex.map { case (f, i) => BoundReference(i, f.dataType, f.nullable) }.toSeq)

  // Reused per row: each task deserializes its own layout, and encode copies its result.
  @transient private lazy val tail = new GenericInternalRow(2)
  @transient private lazy val joined = new JoinedRow()

  def encode(row: InternalRow, insertMs: Long, seq: Long): UnsafeRow = {
    tail.setLong(0, insertMs)
    tail.setLong(1, seq)
    encodeProj(joined(row, tail)).copy()
  }
  def decode(value: UnsafeRow): UnsafeRow = decodeProj(value).copy()
  def storeKey(key: UnsafeRow): UnsafeRow = {
    val w = new UnsafeRowWriter(1, key.getSizeInBytes)
    w.resetRowWriter()
    w.write(0, key.getBytes)
    w.getRow
  }
  def groupingKey(storeKey: UnsafeRow): UnsafeRow = {
    val bytes = storeKey.getBinary(0)
    val k = new UnsafeRow(keySchema.length)
    k.pointTo(bytes, bytes.length)
    k
  }
  def insertMs(value: UnsafeRow): Long = value.getLong(width)
  def seq(value: UnsafeRow): Long = value.getLong(width + 1)
}
