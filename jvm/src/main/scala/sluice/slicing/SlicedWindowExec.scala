package sluice.slicing

import scala.collection.mutable.ArrayBuffer
import scala.jdk.CollectionConverters._

import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Attribute, Expression, JoinedRow, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.catalyst.expressions.aggregate.DeclarativeAggregate
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.sluice.{SluiceStateStoreExec, StatefulOperatorSupport, StreamContext}
import org.apache.spark.sql.types.StructType

import sluice.spark.PlanTypes.{SparkPlan, StatefulOperatorStateInfo}
import sluice.state.KeyedRows

/**
 * The state side of a sliding-window aggregation that emits final results, kept per slice: one state
 * row per (first window, keys) holds the merged partial aggregates of the slice of event time whose
 * rows have that first window, and a window is formed from its slices when the watermark closes it.
 * It stands where Spark's state restore, merges and append-mode state save stood (see
 * [[SlicedStateRule]]), over rows partitioned by the keys alone, so every slice of a key's windows
 * is in one partition.
 *
 * Per batch and partition:
 *  1. each input row (a slice's partial aggregates from one map task) is merged into its slice's
 *     state row, unless every window of the slice ended at or before the late-events watermark;
 *  2. every window ending after the late-events watermark and at or before the eviction watermark
 *     is formed for each key from its slices in the state, and emitted once, as Spark's save emits it;
 *  3. slices whose last window is now closed are removed.
 *
 * Why the results are Spark's: Spark drops a (window, keys) partial row whose window ended at or
 * before the late-events watermark and emits a (window, keys) row in the batch whose eviction
 * watermark first reaches the window's end. Here a slice row accepted in a batch only reaches the
 * windows still open then (the closed ones were emitted in an earlier batch and are never formed
 * again), and a window is formed exactly in the batch Spark would emit it, from every accepted row of
 * its slices: a slice is removed only once its last window has been formed. The merges happen in
 * another order than Spark's (per slice, then per window), which changes no result of an exact
 * aggregate (count, integer sums, min, max); floating-point sums may differ in the last bits, as they
 * do in Spark between two runs with different batches.
 *
 * Invariants: the state holds a row only for a slice with a window not yet closed; the rows of one
 * (window, keys) are emitted in one batch; the output order follows the store's iteration order, so
 * a replayed batch emits the rows it emitted, in the same order for a store that iterates the same.
 */
private[slicing] case class SlicedWindowExec(
    info: StatefulOperatorStateInfo,
    /** The previous batch's watermark (ms): a window ending at or before it was already emitted. */
    lateEventsWatermarkMs: Long,
    /** This batch's watermark (ms): a window ending at or before it is emitted now. */
    evictionWatermarkMs: Long,
    /** Spark's state key: the window (in the input, each slice's first window) and the keys. */
    grouping: Seq[Attribute],
    window: Attribute,
    /** Each window's start and end after the first window's, in microseconds. */
    shifts: Seq[Long],
    /** Window i of a slice as an expression of its first window, the `window` attribute. */
    windows: Seq[Expression],
    functions: Seq[DeclarativeAggregate],
    /** Spark's state save's output: `grouping` and then the aggregates' buffers. */
    override val output: Seq[Attribute],
    child: SparkPlan) extends SluiceStateStoreExec {

  override def context: Option[StreamContext] = None
  override def stateInfo: Option[StatefulOperatorStateInfo] = Some(info)
  override def keyAttributes: Seq[Attribute] = grouping.filterNot(_.exprId == window.exprId)
  override def stateKeySchema: StructType = DataTypeUtils.fromAttributes(grouping)
  override def stateValueSchema: StructType = DataTypeUtils.fromAttributes(output.drop(grouping.size))
  override def shortName: String = SlicedWindowExec.OperatorName
  override protected def nextDueName: String = "sliced window state"
  override protected def dueWithoutInput(next: Long, newInputWatermark: Long): Boolean = false

  // As Spark's append-mode save: a batch without input runs whenever the watermark moved on, since a
  // window may close in it.
  override def shouldRunAnotherBatch(newInputWatermark: Long): Boolean = newInputWatermark > evictionWatermarkMs

  override protected def doExecute(): RDD[InternalRow] = {
    metrics // registered on the driver
    val late = lateEventsWatermarkMs * 1000
    val evict = evictionWatermarkMs * 1000
    val inputs = child.output
    val keyCols = grouping
    val windowOrdinal = grouping.indexWhere(_.exprId == window.exprId)
    val shift = shifts.toArray
    val lastShift = shifts.max
    val windowExprs = windows
    val fns = functions
    val bufferCols = output.drop(grouping.size)

    mapPartitionsWithStore { (store, iter) =>
      val rows = KeyedRows.of(store)
      val keyOf = UnsafeProjection.create(keyCols, inputs)
      val bufferOf = UnsafeProjection.create(inputs.drop(keyCols.size), inputs)
      val left = fns.flatMap(_.aggBufferAttributes)
      val merge = UnsafeProjection.create(fns.flatMap(_.mergeExpressions), left ++ fns.flatMap(_.inputAggBufferAttributes))
      val initial = UnsafeProjection.create(fns.flatMap(_.initialValues))(InternalRow.empty).copy()
      // The grouping of window i: the first window replaced by window i.
      val windowKeys = windowExprs.map(w => UnsafeProjection.create(keyCols.map(a => if (a.exprId == window.exprId) w else a), keyCols))
      val outputRow = UnsafeProjection.create(output, keyCols ++ bufferCols)
      val joined = new JoinedRow
      def merged(into: UnsafeRow, buffer: UnsafeRow): UnsafeRow = merge(joined(if (into == null) initial else into, buffer))
      def firstEnd(key: UnsafeRow): Long = key.getStruct(windowOrdinal, 2).getLong(1)
      var dropped = 0L
      var updated = 0L
      var removed = 0L

      longMetric("allUpdatesTimeMs") += timeTakenMs {
        iter.foreach { row =>
          val key = keyOf(row)
          if (firstEnd(key) + lastShift <= late) dropped += 1 // every window of the slice was emitted
          else {
            rows.put(key, merged(rows.get(key), bufferOf(row)))
            updated += 1
          }
        }
      }

      // The slices with a window closing now, gathered per key (the grouping without the window) in
      // the store's order: each key's windows are formed from its own few slices, and its rows go out
      // before the next key's are formed.
      val keysOf = UnsafeProjection.create(keyAttributes, keyCols)
      val slicesOf = new java.util.LinkedHashMap[UnsafeRow, ArrayBuffer[(UnsafeRow, UnsafeRow)]]()
      val done = ArrayBuffer.empty[UnsafeRow]
      def closesNow(end: Long): Boolean = shift.exists { d => val e = end + d; e > late && e <= evict }
      longMetric("allRemovalsTimeMs") += timeTakenMs {
        rows.iterator().foreach { case (key, buffer) =>
          val end = firstEnd(key)
          if (closesNow(end)) {
            val slice = (key.copy(), buffer.copy())
            val k = keysOf(key)
            val list = slicesOf.get(k)
            if (list == null) slicesOf.put(k.copy(), ArrayBuffer(slice)) else list += slice
          }
          if (end + lastShift <= evict) done += key.copy()
        }
        done.foreach { k => rows.remove(k); removed += 1 }
      }

      // Per key: each window closing now (by its end), merged from the key's slices in it.
      var emitted = 0L
      val out = slicesOf.values().asScala.iterator.flatMap { slices =>
        val windowsByEnd = new java.util.TreeMap[java.lang.Long, (UnsafeRow, UnsafeRow)]()
        slices.foreach { case (key, buffer) =>
          val end = firstEnd(key)
          var i = 0
          while (i < shift.length) {
            val e = end + shift(i)
            if (e > late && e <= evict) {
              val sofar = windowsByEnd.get(e)
              windowsByEnd.put(e,
                if (sofar == null) (windowKeys(i)(key).copy(), merged(null, buffer).copy())
                else (sofar._1, merged(sofar._2, buffer).copy()))
            }
            i += 1
          }
        }
        windowsByEnd.values().asScala.iterator.map { case (k, b) =>
          emitted += 1
          outputRow(joined(k, b))
        }
      }
      StatefulOperatorSupport.onCompletion(out) {
        timedCommit(store.commit())
        reportStoreMetrics(store)
        addRows(output = emitted, updated = updated)
        longMetric("numRemovedStateRows") += removed
        longMetric("numRowsDroppedByWatermark") += dropped
      }
    }
  }

  override def simpleString(maxFields: Int): String =
    s"$nodeName [${grouping.mkString(", ")}], ${windows.size} windows per slice of ${window.name}, " +
      s"functions [${functions.mkString(", ")}], opId = ${info.operatorId}, watermarks = $lateEventsWatermarkMs / $evictionWatermarkMs"

  override protected def withNewChildInternal(newChild: SparkPlan): SlicedWindowExec = copy(child = newChild)
}

private[slicing] object SlicedWindowExec {
  /** The operator's name in query progress and in the checkpoint's operator metadata. */
  val OperatorName = "slicedWindowAggregate"
}
