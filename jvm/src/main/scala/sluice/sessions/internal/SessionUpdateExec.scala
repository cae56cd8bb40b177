package sluice.sessions.internal

import scala.collection.mutable.ArrayBuffer

import org.apache.hadoop.conf.Configuration

import org.apache.spark.TaskContext
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Attribute, GenericInternalRow, JoinedRow, UnsafeRow}
import org.apache.spark.sql.catalyst.plans.logical.EventTimeWatermark
import org.apache.spark.sql.sluice.{SluiceStateStoreExec, StatefulOperatorSupport, StreamContext}
import org.apache.spark.sql.types.StructType

import sluice.spark.PlanTypes.{
  SQLMetric, SessionWindowStateStoreRestoreExec, SparkPlan, StreamingSessionWindowStateManager
}
import sluice.spark.StateStoreTypes.StateSchemaValidationResult
import sluice.spark.StateStoreTypes.StateStore
import sluice.suppress.internal.{LateDropsCounted, LateRecordsExec, SessionLateStage, SuppressExec}

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
 *
 * Under `until_window_closes` with a grace below the watermark delay (`earlyMs` > 0, the delay
 * minus the grace), a session closes once stream time passes its end plus the grace, before Spark's
 * watermark evicts it. A merged session that had closed before the batch (its end at or before
 * the batch's closing time, [[SuppressExec.closeTime]] of the late-events watermark) yet differs
 * from what was stored took only late records: Kafka Streams judges a session record late by the
 * session it merges into and never stores it. Such a session is undone: the stored sessions inside
 * it stay as they were, nothing is emitted for it, and it counts as one late drop of the suppress
 * above. When that suppress keeps its late records, the records inside each undone session are
 * written instead (see [[LateCandidates]]) and count one each.
 */
private[sluice] case class SessionUpdateExec(
    keyAttributes: Seq[Attribute],
    sessionAttribute: Attribute,
    retracted: Attribute,
    stateFormatVersion: Int,
    context: Option[StreamContext],
    child: SparkPlan,
    earlyMs: Long = 0L)
  extends SluiceStateStoreExec with LateDropsCounted {

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
    // Sessions that had closed before this batch, by the grace (see the class comment), in ms.
    val closedAtOrBefore: Option[Long] =
      if (earlyMs > 0) Some(SuppressExec.closeTime(ctx.lateEventsWatermarkMs, earlyMs)) else None
    val stage: Option[SessionLateStage] =
      if (earlyMs > 0) child.collectFirst { case l: LateRecordsExec if l.stagesSessions => l.sessionStage() } else None
    val counters = lateDropCounters // the suppress above's (LateDropsCounted)
    mapPartitionsWithPrefixStore(m.getNumColsForPrefixKey) { (store, rows) =>
      val kept = stage.map(new KeptLateSessions(_, TaskContext.getPartitionId()))
      val changes = new SessionChanges(m, store, rows.map(_.asInstanceOf[UnsafeRow]), sessionOrdinal, retractedOrdinal,
        closedAtOrBefore, kept)
      StatefulOperatorSupport.onCompletion(changes) {
        val late = kept.fold(changes.undone)(_.finish())
        counters.foreach(_ += late)
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

/**
 * One partition's late records of undone sessions (see [[SessionUpdateExec]]): the batch's staged
 * candidates, read when the first undone session needs them, and the partition's file of late
 * records, opened with its first record.
 */
private final class KeptLateSessions(stage: SessionLateStage, partition: Int) {
  private lazy val candidates = stage.candidates()
  private var file: Option[org.apache.spark.sql.sluice.BatchFiles.File] = None
  private val lateBy = new GenericInternalRow(1)
  private val joined = new JoinedRow()
  private var written = 0L

  /** Writes the staged records of `key` inside the undone session [startUs, endUs]. */
  def keep(key: UnsafeRow, startUs: Long, endUs: Long): Unit = {
    val inside = candidates.getOrElse(key, Nil).filter(c => c.start >= startUs && c.end <= endUs)
    // Every record of an undone session was staged (its own session ends no later than the merged
    // one): none found means the staged keys and the session's disagree, which must not pass silently.
    if (inside.isEmpty) {
      throw new IllegalStateException(s"no staged late record for the closed session [$startUs, $endUs] of a key " +
        s"in partition $partition (${candidates.size} keys staged)")
    }
    lateBy.setLong(0, stage.closeMs - endUs / 1000)
    val f = file.getOrElse { val opened = stage.open(partition); file = Some(opened); opened }
    inside.foreach(c => f.write(joined(c.record, lateBy)))
    written += inside.size
  }

  /** Puts the partition's file in place; the number of records written. */
  def finish(): Long = {
    file.foreach(_.commit())
    written
  }
}

/** One partition's changes, key by key, as [[SessionUpdateExec]] describes them. */
private final class SessionChanges(
    manager: StreamingSessionWindowStateManager,
    store: StateStore,
    rows: Iterator[UnsafeRow],
    sessionOrdinal: Int,
    retractedOrdinal: Int,
    closedAtOrBefore: Option[Long],
    kept: Option[KeptLateSessions])
  extends Iterator[InternalRow] {
  private val input = rows.buffered
  private var pending: Iterator[UnsafeRow] = Iterator.empty
  var updated = 0L
  var removed = 0L
  var emitted = 0L
  var undone = 0L

  override def hasNext: Boolean = {
    while (!pending.hasNext && input.hasNext) pending = nextKey()
    pending.hasNext
  }

  override def next(): InternalRow = {
    if (!hasNext) throw new NoSuchElementException
    emitted += 1
    pending.next()
  }

  /**
   * `merged` with each session that had closed (its end at or before `closeMs`) and differs from
   * what was stored replaced by the stored sessions inside it: the batch's records in it were late.
   * Sessions do not overlap, so each stored session lies inside exactly one merged session.
   */
  private def undoClosed(key: UnsafeRow, merged: Seq[UnsafeRow], stored: Seq[UnsafeRow], closeMs: Long)
      : Seq[UnsafeRow] = {
    val (late, open) = merged.partition(m => window(m)._2 / 1000 <= closeMs && !stored.contains(m))
    if (late.isEmpty) merged
    else {
      val spans = late.map(window)
      undone += late.size
      kept.foreach(k => spans.foreach { case (s, e) => k.keep(key, s, e) })
      (open ++ stored.filter { s =>
        val (ss, se) = window(s)
        spans.exists { case (s0, e0) => ss >= s0 && se <= e0 }
      }).sortBy(window(_)._1)
    }
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
    val sessions = closedAtOrBefore.fold(merged.toSeq)(undoClosed(key, merged.toSeq, stored, _))
    val (upserted, deleted) = manager.updateSessions(store, key, sessions)
    updated += upserted
    removed += deleted
    val windows = sessions.map(window).toSet
    val gone = stored.filterNot(s => windows.contains(window(s))).map { s =>
      s.setBoolean(retractedOrdinal, true)
      s
    }
    val changed = sessions.filterNot(m => stored.contains(m))
    (gone.iterator ++ changed.iterator)
  }
}
