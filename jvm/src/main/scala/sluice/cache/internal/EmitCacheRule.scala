package sluice.cache.internal

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.{Alias, Attribute, NamedExpression}
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.internal.Logging
import org.apache.spark.sql.streaming.OutputMode

import org.apache.spark.sql.sluice.{SluiceStatefulNode, StatefulOperatorSupport}

import sluice.conf.SluiceConf
import sluice.spark.PlanTypes.{WriteToMicroBatchDataSource, WriteToMicroBatchDataSourceV1}
import sluice.spark.SparkNodes
import sluice.state.GroupingColumns
import sluice.sessions.internal.SessionUpdateNode
import sluice.suppress.internal.SuppressNode

/**
 * Optimizer rule (installed by sluice.plugin.SluiceExtensions): with `spark.sluice.commit.interval.ms`
 * > 0, puts an [[EmitCacheNode]] directly below the sink of an update-mode query, above the
 * query's last stateful operator when that operator is a streaming aggregation.
 *
 * Placement rule (what makes it safe): the cache delays rows, so nothing stateful may sit above it.
 * A stateful operator above an aggregation (suppress, deduplication, another aggregation) must see
 * every row the aggregation produced in the batch it produced it: suppress closes windows by the
 * watermark, and a row held back past the watermark would arrive after its window was closed and
 * be dropped as late. So the rule walks down from the sink through stateless operators only; if the
 * first stateful operator it meets is an aggregation the cache goes right above it, otherwise no
 * cache is added, and the plan shows an [[EmitCacheSkipped]] with the reason (logged once per query).
 *
 * It runs only while a query plans a batch, micro-batch or real-time (the output mode comes from that batch's
 * execution); with interval 0 it still keeps a node where the checkpoint already has emission-cache
 * state, so rows held before the change are forwarded instead of lost.
 */
private[sluice] case class EmitCacheRule(session: SparkSession) extends Rule[LogicalPlan] with Logging {
  override def apply(plan: LogicalPlan): LogicalPlan = {
    if (!plan.isStreaming || plan.exists(p => p.isInstanceOf[EmitCacheNode] || p.isInstanceOf[EmitCacheSkipped])) {
      return plan
    }
    val stream = StatefulOperatorSupport.currentStream(session)
    val exec = stream.flatMap(s => Option(s.lastExecution))
    exec match {
      case Some(e) =>
        val interval = SluiceConf(session.conf.getAll).commitIntervalMs
        val update = e.outputMode == OutputMode.Update()
        var index = 0 // the plan has no EmitCacheNode yet (checked above)
        // The next cache's id is taken whether or not it is added, so ids follow the plan's shape.
        def cached(): Boolean = {
          val id = SluiceConf.EmitCacheIds.from + index
          index += 1
          interval > 0 || hasState(e.checkpointLocation, id)
        }
        def cache(keys: Seq[Attribute], below: LogicalPlan): LogicalPlan =
          if (cached()) EmitCacheNode(keys, interval, below) else below
        def place(p: LogicalPlan): LogicalPlan = p match {
          case a: Aggregate if a.child.isStreaming && update && GroupingColumns.allInOutputOrder(a).nonEmpty =>
            cache(GroupingColumns.allInOutputOrder(a), a)
          // The optimizer folded the projection above into the aggregation (a sink's to_json(struct(...))
          // over it, say): split it again, so that the cache sees the grouping columns it is keyed by.
          case a: Aggregate
              if a.child.isStreaming && update && a.groupingExpressions.nonEmpty &&
              a.groupingExpressions.forall(_.isInstanceOf[Attribute]) =>
            if (cached()) {
              val (inner, outer) = EmitCacheRule.split(a)
              SparkNodes.project(outer, EmitCacheNode(GroupingColumns.allInOutputOrder(inner), interval, inner))
            } else a
          // Session windows in update mode (sluice.sessions): keyed by (keys, session window), so a
          // retraction replaces the held update of the same session, as in Kafka Streams' cache.
          case n: SessionUpdateNode if n.keyColumns.nonEmpty => cache(n.keyColumns, n)
          case top if isStateful(top) => if (interval > 0) skip(top, whyNot(top, e.outputMode)) else top
          case other if passesThrough(other) => other.mapChildren(place)
          case other => other
        }
        place(plan)
      case None => plan
    }
  }

  private def whyNot(top: LogicalPlan, mode: OutputMode): String = top match {
    case _: Aggregate if mode != OutputMode.Update() =>
      s"the output mode is $mode; the emission cache deduplicates update-mode output only"
    case _: Aggregate => "the aggregation's output does not keep all of its grouping columns"
    case _: SuppressNode => "the query ends in suppress, which already decides when each row is emitted; a " +
        "cache below it would hold rows past the watermark that closes their windows"
    case other => s"the last stateful operator (${other.nodeName}) is not an aggregation; the cache sits " +
        "only directly below the sink, above an update-mode aggregation"
  }

  private def skip(top: LogicalPlan, reason: String): LogicalPlan = {
    StatefulOperatorSupport.currentStream(session).foreach { s =>
      if (EmitCacheRule.loggedQueries.add(s.runId)) {
        logWarning(s"Query ${s.id}: ${SluiceConf.CommitIntervalMs.key} > 0 but no emission cache is added: $reason.")
      }
    }
    EmitCacheSkipped(reason, top)
  }

  /** Operators that keep state across micro-batches. */
  private def isStateful(p: LogicalPlan): Boolean =
    p.isInstanceOf[SluiceStatefulNode] || StatefulOperatorSupport.isSparkStateful(p)

  /** Stateless operators (and the sink's write node) the rule may look through. */
  private def passesThrough(p: LogicalPlan): Boolean = p match {
    case _: Project | _: Filter | _: SubqueryAlias | _: Union | _: SerializeFromObject | _: DeserializeToObject |
        _: MapElements | _: MapPartitions | _: TypedFilter | _: Generate | _: EventTimeWatermark |
        _: Repartition | _: RepartitionByExpression | _: ResolvedHint | _: WriteToMicroBatchDataSource |
        _: WriteToMicroBatchDataSourceV1 => true
    case _ => false
  }

  private def hasState(stateRoot: String, operatorId: Long): Boolean =
    EmitCacheExec.hasState(session, stateRoot, operatorId)
}

private[sluice] object EmitCacheRule {

  /**
   * `agg` (grouped by attributes) as an aggregation whose output is its grouping columns and its
   * aggregate functions, and the projection of that output onto `agg`'s output (same columns, same
   * ids). Its state is unchanged: a streaming aggregation stores its groups and buffers, not its output.
   */
  def split(agg: Aggregate): (Aggregate, Seq[NamedExpression]) = {
    val functions = agg.aggregateExpressions.flatMap(_.collect { case f: AggregateExpression => f })
      .foldLeft(Seq.empty[AggregateExpression])((seen, f) => if (seen.exists(_.semanticEquals(f))) seen else seen :+ f)
      .zipWithIndex.map { case (f, i) => f -> Alias(f, s"__sluice_agg$i")() }
    val inner = SparkNodes.aggregateWith(agg)(aggregateExpressions =
      agg.groupingExpressions.map(_.asInstanceOf[Attribute]) ++ functions.map(_._2))
    val outer = agg.aggregateExpressions.map(_.transformDown {
      case f: AggregateExpression => functions.find(_._1.semanticEquals(f)).get._2.toAttribute
    }.asInstanceOf[NamedExpression])
    (inner, outer)
  }

  /** Query runs whose skipped emission cache was already logged. */
  private val loggedQueries = java.util.concurrent.ConcurrentHashMap.newKeySet[java.util.UUID]()
}
