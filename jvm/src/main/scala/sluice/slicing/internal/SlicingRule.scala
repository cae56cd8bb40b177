package sluice.slicing.internal

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.{Alias, Attribute, Expression, NamedExpression}
import org.apache.spark.sql.catalyst.expressions.aggregate.{Partial, PartialMerge}
import org.apache.spark.sql.types.{DataType, StructType, TimestampNTZType, TimestampType}

import sluice.conf.SluiceConf
import sluice.spark.PlanTypes.{ColumnarRule, ExpandExec, FilterExec, HashAggregateExec, ProjectExec, SparkPlan}
import sluice.spark.SparkNodes
import sluice.aggregate.internal.SwitchedRewrite

/**
 * Window slicing (`spark.sluice.window.slicing`): the map side of a sliding-window aggregation
 * aggregates each slice of event time once per key, then forms the windows from the slices, as
 * Flink's window slicing and Kafka Streams' sliding windows avoid one aggregate per window and row.
 *
 * Spark's map side forms every window of every row, then aggregates (`size / slide` rows per input
 * row into the partial aggregation):
 * {{{
 *   partial aggregate by (window, keys) <- Expand(one row per window) <- rows
 * }}}
 * sliced, the windows are formed from one row per (first window, keys) of the partition:
 * {{{
 *   merge by (window, keys) <- Expand(one row per window, from the first) <- partial aggregate by (first window, keys) <- rows
 * }}}
 * Why the result is the same: every window of a row is a function of its first window
 * ([[SlidingWindows]]), so the rows of one (first window, keys) group share all their windows, and the
 * merge of their partial aggregates in each window is what aggregating the rows there gives. The
 * output (keys and aggregation buffers) has the same columns, so the exchange, the state store and
 * its schema, and everything above are untouched: a checkpoint written with slicing runs on without
 * it, and the other way round.
 *
 * A [[SwitchedRewrite]] (so not of real-time plans) of the partial aggregations Spark plans directly
 * over such an Expand (the window size a multiple of the slide: otherwise a filter between them drops
 * the windows a row is not in). It leaves alone an aggregation whose functions read the window column.
 * Experimental (conf.json): each partial aggregation by a window that it leaves alone is named, with
 * why ([[SlicingRule.Why]]), in one INFO line per plan.
 */
/** The map side of a sliding-window aggregation: the windows' Expand and a projection between them, if any. */
private[sluice] final case class MapSide(expand: ExpandExec, between: Option[ProjectExec], windows: SlidingWindows,
    window: Attribute)

private[sluice] object SlicingRule {

  /** The rewrite's name in the lines saying why it left an aggregation alone. */
  val Name = "window slicing"

  /**
   * Why a map-side aggregation by a window stays as Spark plans it: the texts of the INFO line
   * ([[sluice.rewrites.NotApplied]]) for the aggregations the rule examines, the partial ones grouping
   * by a window column (a struct of timestamps `start` and `end`).
   */
  object Why {
    val Tumbling = "the windows are tumbling (slide == size): each row is in one window, so there is nothing to slice"
    val SlideNotDividingSize = "the window size is not a multiple of the slide: Spark filters out the windows a row " +
      "is not in between the windows' Expand and the aggregation"
    val NoWindows = "its window column is not formed by Spark's windows directly below it"
    val NotSparksWindows = "the Expand below it does not form Spark's sliding windows"
    val ProjectionReadsWindow = "the projection between the windows and the aggregation reads the window column"
    val NotByTheWindows = "it does not group by the window column of the Expand below it"
    val WindowReadElsewhere = "an aggregate function or another grouping expression reads the window column, " +
      "which slicing would give each slice's first window"
    val NotAllPartial = "it is not a plain partial aggregation (a distinct aggregate, or partial aggregates merged)"
  }

  def rule(session: SparkSession): ColumnarRule =
    SwitchedRewrite(session, SluiceConf.WindowSlicing, Name) {
      case agg: HashAggregateExec if examines(agg) => sliced(agg)
    }

  /** The aggregations the rule examines: map-side ones (no distribution required) grouping by a window column. */
  private def examines(agg: HashAggregateExec): Boolean =
    agg.requiredChildDistributionExpressions.isEmpty && agg.groupingExpressions.exists(g => isWindowType(g.dataType))

  private def isWindowType(t: DataType): Boolean = t match {
    case StructType(Array(s, e)) => s.name == SlidingWindows.Start && e.name == SlidingWindows.End &&
      Seq(s.dataType, e.dataType).forall(d => d == TimestampType || d == TimestampNTZType)
    case _ => false
  }

  /** The sliced map side replacing `agg`, where `agg` is a partial aggregation over sliding windows; else why not. */
  def sliced(agg: HashAggregateExec): Either[String, SparkPlan] = sliceable(agg).map(slice(agg, _))

  /**
   * The windows below `agg`, where `agg` is a map-side partial aggregation by window (and keys) over
   * the sliding windows' Expand that does not read the window otherwise; else why not. Spark may put
   * a projection between them (its grouping expressions pulled out, `bid.auction AS _groupingexpression`);
   * one that passes the window on and reads it nowhere else is kept.
   */
  def sliceable(agg: HashAggregateExec): Either[String, MapSide] = {
    val below = agg.child match {
      case expand: ExpandExec => Right((expand, None))
      case p: ProjectExec => p.child match {
          case expand: ExpandExec => Right((expand, Some(p)))
          case _ => Left(noExpand(agg))
        }
      case _ => Left(noExpand(agg))
    }
    if (!isMapSide(agg)) Left(Why.NotAllPartial)
    else below.flatMap { case (expand, between) =>
      SlidingWindows.of(expand.projections, expand.output).toRight(Why.NotSparksWindows).flatMap { windows =>
        val window = expand.output(windows.column)
        def isWindow(e: Expression) = e match {
          case a: Attribute => a.exprId == window.exprId
          case _ => false
        }
        val passedOn = between.forall(p =>
          p.projectList.exists(isWindow) && p.projectList.forall(_.deterministic) &&
          p.projectList.forall(e => isWindow(e) || !e.references.contains(window)))
        val groupsByWindow = agg.groupingExpressions.exists(isWindow)
        val windowReadElsewhere =
          agg.groupingExpressions.exists(g => !isWindow(g) && g.references.contains(window)) ||
          agg.aggregateExpressions.exists(_.references.contains(window))
        if (!passedOn) Left(Why.ProjectionReadsWindow)
        else if (!groupsByWindow) Left(Why.NotByTheWindows)
        else if (windowReadElsewhere) Left(Why.WindowReadElsewhere)
        else Right(MapSide(expand, between, windows, window))
      }
    }
  }

  /**
   * Why no Expand of windows is directly below `agg`: below projections and filters, an Expand means
   * a filter of the windows (size not a multiple of the slide); a projection computing the window
   * column means one window per row (tumbling windows); anything else, no windows of Spark's.
   */
  private def noExpand(agg: HashAggregateExec): String = {
    val windows = agg.groupingExpressions.filter(g => isWindowType(g.dataType)).map(_.toAttribute.exprId).toSet
    def walk(p: SparkPlan, filtered: Boolean): String = p match {
      case project: ProjectExec if project.projectList.exists {
            case a: Alias => windows.contains(a.exprId)
            case _ => false
          } => Why.Tumbling
      case project: ProjectExec => walk(project.child, filtered)
      case filter: FilterExec => walk(filter.child, filtered = true)
      case _: ExpandExec if filtered => Why.SlideNotDividingSize
      case _ => Why.NoWindows
    }
    walk(agg.child, filtered = false)
  }

  private def isMapSide(agg: HashAggregateExec): Boolean =
    agg.requiredChildDistributionExpressions.isEmpty &&
    agg.aggregateExpressions.forall(a => a.mode == Partial && !a.isDistinct)

  private def slice(agg: HashAggregateExec, side: MapSide): SparkPlan = {
    val bySlice = perSlice(agg, side)
    val first = bySlice.output.find(_.exprId == side.window.exprId).get
    val windows = side.windows
    val intoWindows = SparkNodes.expandExec(
      projections = windows.windows.indices.map(i =>
        bySlice.output.map(a => if (a.exprId == first.exprId) windows.fromFirst(i, first) else a)),
      output = bySlice.output,
      child = bySlice)
    SparkNodes.hashAggregateWith(agg,
      aggregateExpressions = agg.aggregateExpressions.map(_.copy(mode = PartialMerge)),
      initialInputBufferOffset = agg.groupingExpressions.size,
      child = intoWindows)
  }

  /**
   * `agg` (a partial aggregation by window and keys over the windows of `side`) aggregating by first
   * window and keys instead: its output has the same columns, the window column holding each row's
   * first window.
   */
  def perSlice(agg: HashAggregateExec, side: MapSide): HashAggregateExec = {
    val (expand, windows) = (side.expand, side.windows)
    // The Expand's columns once, with the first window where the window was: the expressions above
    // read them by the same attributes.
    val columns: Seq[NamedExpression] = expand.output.zip(expand.projections.head).zipWithIndex.map {
      case ((out, _), j) if j == windows.column => as(out, windows.windows.head)
      case ((out, a: Attribute), _) if a.exprId == out.exprId => a
      case ((out, e), _) => as(out, e)
    }
    val firstWindows = SparkNodes.projectExec(columns, expand.child)
    agg.withNewChildren(Seq(side.between.fold[SparkPlan](firstWindows)(_.withNewChildren(Seq(firstWindows)))))
      .asInstanceOf[HashAggregateExec]
  }

  /** `e` under the attribute `out`: the same id, name and metadata (the watermark's delay). */
  private def as(out: Attribute, e: Expression): NamedExpression =
    Alias(e, out.name)(exprId = out.exprId, qualifier = out.qualifier, explicitMetadata = Some(out.metadata))
}
