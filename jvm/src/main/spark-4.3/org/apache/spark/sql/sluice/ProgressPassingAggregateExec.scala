package org.apache.spark.sql.sluice

import java.util.concurrent.TimeUnit.NANOSECONDS

import org.apache.spark.TaskContext
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.analysis.WidenStatefulOpNullability
import org.apache.spark.sql.catalyst.expressions.{Attribute, Expression, MutableProjection, NamedExpression, UnsafeRow}
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression
import org.apache.spark.sql.catalyst.streaming.InternalOutputModes.Update
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.execution.SparkPlan
import org.apache.spark.sql.execution.streaming.{
  StatefulStreamlineAggregateExec, StatefulStreamlineAggregationProcessor
}
import org.apache.spark.sql.execution.streaming.operators.stateful.StatefulOperatorStateInfo
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.streaming.OutputMode
import org.apache.spark.util.CompletionIterator

import _root_.sluice.suppress.internal.ProgressRows

/**
 * Spark's real-time streaming aggregation (the update-mode merge stage of
 * `StatefulStreamlineAggregateExec`, Spark 4.3) under suppress(until_window_closes), forwarding the
 * progress rows of [[ProgressRows]] as they came: they reach suppress without a state lookup, a state
 * row or an output row counted. Every other row is aggregated as Spark does, by Spark's own processor,
 * with Spark's state schema, operator name and metrics, so a checkpoint is the same with and without.
 *
 * Eviction is by `eventTimeWatermarkForEviction` alone, at the end of the batch and, when Spark's
 * incremental cleanup is on (`spark.sql.streaming.statefulOperator.incrementalCleanupFactor` > 0),
 * also while rows come: sluice sets it to what every suppress partition had closed before the batch
 * (`RealTimeEviction`), which no row of the batch can reopen. Spark uses the late-events watermark for
 * its incremental cleanup, which is unset here (suppress judges lateness).
 *
 * A subclass, so that everything Spark asks of its stateful operators (progress, state metadata,
 * no-data batches) answers as for Spark's; `withNewChildInternal`, `otherCopyArgs` and `canEqual` keep
 * the subclass through Spark's tree transformations. `window` is the ordinal of the window column in
 * the input rows (a grouping column), where a progress row is told apart.
 */
class ProgressPassingAggregateExec(
    requiredChildDistributionExpressions: Option[Seq[Expression]],
    numShufflePartitions: Option[Int],
    groupingExpressions: Seq[NamedExpression],
    aggregateExpressions: Seq[AggregateExpression],
    aggregateAttributes: Seq[Attribute],
    initialInputBufferOffset: Int,
    resultExpressions: Seq[NamedExpression],
    isFinalAggregate: Boolean,
    outputMode: Option[OutputMode],
    stateFormatVersion: Int,
    child: SparkPlan,
    stateInfo: Option[StatefulOperatorStateInfo],
    eventTimeWatermarkForLateEvents: Option[Long],
    eventTimeWatermarkForEviction: Option[Long],
    val window: Int)
  extends StatefulStreamlineAggregateExec(requiredChildDistributionExpressions, numShufflePartitions,
    groupingExpressions, aggregateExpressions, aggregateAttributes, initialInputBufferOffset, resultExpressions,
    isFinalAggregate, outputMode, stateFormatVersion, child, stateInfo, eventTimeWatermarkForLateEvents,
    eventTimeWatermarkForEviction) {

  override protected def otherCopyArgs: Seq[AnyRef] = Seq(Int.box(window))

  override def canEqual(that: Any): Boolean = that match {
    case p: ProgressPassingAggregateExec => p.window == window
    case _ => false
  }

  override def equals(that: Any): Boolean = that match {
    case p: ProgressPassingAggregateExec => p.canEqual(this) && super.equals(p)
    case _ => false
  }

  override def hashCode(): Int = 31 * super.hashCode() + window

  override protected def withNewChildInternal(newChild: SparkPlan): SparkPlan =
    ProgressPassingAggregateExec.of(copy(child = newChild), window)

  override protected def doExecute(): RDD[InternalRow] = {
    if (!outputMode.contains(Update)) {
      throw new IllegalStateException(s"sluice forwards progress rows in update mode only, not $outputMode")
    }
    metrics // registered on the driver
    val numOutputRows = longMetric("numOutputRows")
    val numUpdatedStateRows = longMetric("numUpdatedStateRows")
    val allUpdatesTimeMs = longMetric("allUpdatesTimeMs")
    val numRowsReadDuringEviction = longMetric("numRowsReadDuringEviction")
    val numRemovedStateRows = longMetric("numRemovedStateRows")
    val allRemovalsTimeMs = longMetric("allRemovalsTimeMs")
    val commitTimeMs = longMetric("commitTimeMs")
    val numRowsIncrementallyRemoved = longMetric("numRowsIncrementallyRemoved")
    val windowOrdinal = window
    val evictionWm = eventTimeWatermarkForEviction
    val cleanupFactor = conf.getConf(SQLConf.STREAMING_STATE_INCREMENTAL_CLEANUP_FACTOR)
    // As Spark's operator builds its own (its fields are private).
    val keySchema = WidenStatefulOpNullability.widenStateSchema(DataTypeUtils.fromAttributes(keyExpressions))
    val valueSchema = WidenStatefulOpNullability.widenStateSchema(stateManager.getStateValueSchema)

    child.execute().mapPartitionsWithStateStore(getStateInfo, keySchema, valueSchema,
      NoPrefixKeyStateEncoderSpec(keySchema), session.sessionState,
      Some(session.streams.stateStoreCoordinator)) { (store, iter) =>
      val processor = new StatefulStreamlineAggregationProcessor(TaskContext.get().partitionId(),
        groupingExpressions, inputAttributes, aggregateExpressions, aggregateAttributes, initialInputBufferOffset,
        resultExpressions, (exprs, schema) => MutableProjection.create(exprs, schema), stateManager, store,
        numUpdatedStateRows)
      val incremental = if (cleanupFactor > 0) Some(stateManager.evictionIterator(store, evictionWm)) else None
      // The processor's output row is reused: each is consumed before the next is asked for.
      val rows = iter.map { row =>
        if (isProgress(row, windowOrdinal)) row
        else {
          var out: UnsafeRow = null
          allUpdatesTimeMs += timeTakenMs { out = processor.process(row) }
          incremental.foreach { evictions =>
            allRemovalsTimeMs += timeTakenMs {
              var removed = 0
              while (removed < cleanupFactor && evictions.hasNext) {
                evictions.next()
                removed += 1
              }
            }
          }
          numOutputRows += 1
          out
        }
      }
      CompletionIterator[InternalRow, Iterator[InternalRow]](rows, {
          processor.flushDirtyWrites()
          incremental.foreach(i => numRowsIncrementallyRemoved += i.numRowsRemovedSoFar)
          val evictions = incremental.getOrElse(stateManager.evictionIterator(store, evictionWm))
          val start = System.nanoTime
          while (evictions.hasNext) evictions.next()
          allRemovalsTimeMs += NANOSECONDS.toMillis(System.nanoTime - start)
          numRowsReadDuringEviction += evictions.numRowsReadDuringEvictionSoFar
          numRemovedStateRows += evictions.numRowsRemovedSoFar
          commitTimeMs += timeTakenMs { store.commit() }
          setStoreMetrics(store)
          setOperatorMetrics()
        })
    }
  }

  private def isProgress(row: InternalRow, ordinal: Int): Boolean =
    !row.isNullAt(ordinal) && ProgressRows.isProgress(row.getStruct(ordinal, 2).getLong(1))
}

object ProgressPassingAggregateExec {

  /** `a` forwarding progress rows told apart by the window at input ordinal `window`. */
  def of(a: StatefulStreamlineAggregateExec, window: Int): ProgressPassingAggregateExec =
    new ProgressPassingAggregateExec(a.requiredChildDistributionExpressions, a.numShufflePartitions,
      a.groupingExpressions, a.aggregateExpressions, a.aggregateAttributes, a.initialInputBufferOffset,
      a.resultExpressions, a.isFinalAggregate, a.outputMode, a.stateFormatVersion, a.child, a.stateInfo,
      a.eventTimeWatermarkForLateEvents, a.eventTimeWatermarkForEviction, window)
}
