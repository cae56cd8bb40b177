package sluice.sessions.internal

import scala.collection.mutable.ArrayBuffer

import org.apache.hadoop.conf.Configuration

import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Attribute, UnsafeRow}
import org.apache.spark.sql.catalyst.plans.logical.EventTimeWatermark
import org.apache.spark.sql.sluice.{SluiceStateStoreExec, StatefulOperatorSupport, StreamContext}
import org.apache.spark.sql.types.StructType

import sluice.spark.PlanTypes.{
  SQLMetric, SessionWindowStateStoreRestoreExec, SparkPlan, StreamingSessionWindowStateManager
}
import sluice.spark.StateStoreTypes.StateSchemaValidationResult
import sluice.spark.StateStoreTypes.StateStore

/**
 * The update-mode save of a session-window aggregation. Its input is Spark's merge of each key's
 * stored sessions with the batch's rows (one row per session, sorted by key and session start, only
 * keys with input); per key it replaces the stored sessions with the merged ones and emits:
 *  - each stored session that no merged session has the same window (start and end) as, with
 *    `retracted` set: it was merged into another or grew, and its window no longer exists;
 *  - each merged session that differs from what was stored (new, grown, or new aggregates).
 * A session whose window and aggregates did not change is not emitted. What is emitted depends only
 * on the stored sessions and the batch's rows in their sorted order, so a replayed batch emits the
 * same rows. Sessions that end at or before the eviction watermark are then dropped without a row
 * (as Spark's update mode drops closed aggregation state). The stored rows are Spark's own session
 * state layout (`StreamingSessionWindowStateManager`), one row per (key, session start).
 */
private[sluice] case class SessionUpdateExec(
    keyAttributes: Seq[Attribute],
    sessionAttribute: Attribute,
    retracted: Attribute,
    stateFormatVersion: Int,
    context: Option[StreamContext],
    child: SparkPlan)
  extends SluiceStateStoreExec {

  private val manager =
    StreamingSessionWindowStateManager.createStateManager(keyAttributes, sessionAttribute, child.output,
      stateFormatVersion)

  // The restore below reads this operator's store and validates its schema as Spark's own restore
  // does: the same validation here (Spark's own save and restore agree on it the same way).
  override def validateAndMaybeEvolveStateSchema(
      hadoopConf: Configuration, batchId: Long, stateSchemaVersion: Int): List[StateSchemaValidationResult] =
    restore.getOrElse(throw new IllegalStateException("a session update without its restore: " + child.treeString))
      .validateAndMaybeEvolveStateSchema(hadoopConf, batchId, stateSchemaVersion)

  override protected def droppedBelow: Option[SQLMetric] = restore.map(_.longMetric("numRowsDroppedByWatermark"))

  private def restore: Option[SessionWindowStateStoreRestoreExec] =
    child.collectFirst { case r: SessionWindowStateStoreRestoreExec => r }

  private def evicts: Boolean = sessionAttribute.metadata.contains(EventTimeWatermark.delayKey)

  // As Spark's own update-mode aggregations: a batch without input when the watermark has moved,
  // to drop the sessions it closed (it emits nothing), so state stays bounded by the watermark.
  override def shouldRunAnotherBatch(newInputWatermark: Long): Boolean =
    evicts && context.exists(c => newInputWatermark > c.evictionWatermarkMs)

  override def stateKeySchema: StructType = manager.getStateKeySchema
  override def stateValueSchema: StructType = manager.getStateValueSchema
  override def shortName: String = SessionUpdateExec.OperatorName
  override protected def nextDueName: String = "session update (nothing held for later)"
  override protected def dueWithoutInput(next: Long, newInputWatermark: Long): Boolean = false

  override protected def doExecute(): RDD[InternalRow] = {
    val ctx = startBatch("session windows in update mode run only inside a streaming query (writeStream...start())")
    val evictAtOrBeforeUs: Option[Long] =
      if (evicts) Some(ctx.evictionWatermarkMs * 1000L)
      else None
    val sessionOrdinal = child.output.indexWhere(_.exprId == sessionAttribute.exprId)
    val retractedOrdinal = child.output.indexWhere(_.exprId == retracted.exprId)
    val m = manager
    mapPartitionsWithPrefixStore(m.getNumColsForPrefixKey) { (store, rows) =>
      val changes = new SessionChanges(m, store, rows.map(_.asInstanceOf[UnsafeRow]), sessionOrdinal, retractedOrdinal)
      StatefulOperatorSupport.onCompletion(changes) {
        val evicted = evictAtOrBeforeUs.fold(0L) { bound =>
          m.removeByValueCondition(store, row => row.getStruct(sessionOrdinal, 2).getLong(1) <= bound).size.toLong
        }
        timedCommit(m.commit(store))
        longMetric("numRemovedStateRows") += changes.removed + evicted
        reportStoreMetrics(store)
        addRows(output = changes.emitted, updated = changes.updated)
      }
    }
  }

  override protected def withNewChildInternal(newChild: SparkPlan): SessionUpdateExec = copy(child = newChild)
}

private[sluice] object SessionUpdateExec {

  /** The operator's name in Spark's state metadata and the state reader. */
  val OperatorName = "sluiceSessionUpdate"
}

/** One partition's changes, key by key, as [[SessionUpdateExec]] describes them. */
private final class SessionChanges(
    manager: StreamingSessionWindowStateManager,
    store: StateStore,
    rows: Iterator[UnsafeRow],
    sessionOrdinal: Int,
    retractedOrdinal: Int)
  extends Iterator[InternalRow] {
  private val input = rows.buffered
  private var pending: Iterator[UnsafeRow] = Iterator.empty
  var updated = 0L
  var removed = 0L
  var emitted = 0L

  override def hasNext: Boolean = {
    while (!pending.hasNext && input.hasNext) pending = nextKey()
    pending.hasNext
  }

  override def next(): InternalRow = {
    if (!hasNext) throw new NoSuchElementException
    emitted += 1
    pending.next()
  }

  private def window(row: UnsafeRow): (Long, Long) = {
    val w = row.getStruct(sessionOrdinal, 2)
    (w.getLong(0), w.getLong(1))
  }

  private def nextKey(): Iterator[UnsafeRow] = {
    val first = input.next().copy()
    val key = manager.extractKeyWithoutSession(first).copy()
    val merged = ArrayBuffer(first)
    while (input.hasNext && manager.extractKeyWithoutSession(input.head) == key) merged += input.next().copy()
    val stored = manager.getSessions(store, key).map(_.copy()).toVector
    val (upserted, deleted) = manager.updateSessions(store, key, merged.toSeq)
    updated += upserted
    removed += deleted
    val windows = merged.map(window).toSet
    val gone = stored.filterNot(s => windows.contains(window(s))).map { s =>
      s.setBoolean(retractedOrdinal, true)
      s
    }
    val changed = merged.filterNot(m => stored.contains(m))
    (gone.iterator ++ changed.iterator)
  }
}
