package sluice.spark

import org.apache.spark.sql.catalyst.expressions.{Attribute, Expression, NamedExpression}
import org.apache.spark.sql.catalyst.plans.logical.{Aggregate, Expand, Filter, LocalRelation, LogicalPlan, Project}
import org.apache.spark.sql.catalyst.streaming.StreamingRelationV2
import org.apache.spark.sql.connector.catalog.Table
import org.apache.spark.sql.streaming.OutputMode

import sluice.spark.PlanTypes.{
  ProjectExec, SessionWindowStateStoreRestoreExec, SessionWindowStateStoreSaveExec, SparkPlan, StateStoreRestoreExec,
  StateStoreSaveExec, StatefulOperatorStateInfo
}
import sluice.spark.SourceTypes.{DataSource, LogicalRelation, StreamingRelation}

/**
 * Every Spark plan node feature code builds or copies, one method each (as spark-rapids has a shim
 * per Spark constructor it calls): a field Spark adds, removes or renames in a minor breaks only
 * the method here, where a per-minor folder can take it over. Feature code never calls a plan
 * node's constructor, companion `apply` or `copy` itself; `LayeringSuite` checks the class files.
 *
 * A `…With` method copies the node with the fields it names replaced, so a field sluice does not
 * name (an aggregation's hint, Spark's next field with a default) keeps its value.
 */
object SparkNodes {

  /** Spark's physical projection of `projectList` over `child`. */
  def projectExec(projectList: Seq[NamedExpression], child: SparkPlan): ProjectExec =
    org.apache.spark.sql.execution.ProjectExec(projectList, child)

  /** `save` with its state info and output mode set (as Spark's StateOpIdRule sets them). */
  def stateSaveWith(save: StateStoreSaveExec, stateInfo: StatefulOperatorStateInfo, outputMode: OutputMode)
      : StateStoreSaveExec = save.copy(stateInfo = Some(stateInfo), outputMode = Some(outputMode))

  /** `restore` with its state info set. */
  def stateRestoreWith(restore: StateStoreRestoreExec, stateInfo: StatefulOperatorStateInfo): StateStoreRestoreExec =
    restore.copy(stateInfo = Some(stateInfo))

  /** The session-window `save` with its state info and output mode set. */
  def sessionSaveWith(save: SessionWindowStateStoreSaveExec, stateInfo: StatefulOperatorStateInfo,
      outputMode: OutputMode): SessionWindowStateStoreSaveExec =
    save.copy(stateInfo = Some(stateInfo), outputMode = Some(outputMode))

  /** The session-window `restore` with its state info set. */
  def sessionRestoreWith(restore: SessionWindowStateStoreRestoreExec, stateInfo: StatefulOperatorStateInfo)
      : SessionWindowStateStoreRestoreExec = restore.copy(stateInfo = Some(stateInfo))

  /** Spark's logical projection of `projectList` over `child`. */
  def project(projectList: Seq[NamedExpression], child: LogicalPlan): Project = Project(projectList, child)

  /** `p` with the fields named replaced. */
  def projectWith(p: Project)(projectList: Seq[NamedExpression] = p.projectList, child: LogicalPlan = p.child)
      : Project = p.copy(projectList = projectList, child = child)

  /** Spark's logical aggregation (no hint) of `aggregates` grouped by `grouping`, over `child`. */
  def aggregate(grouping: Seq[Expression], aggregates: Seq[NamedExpression], child: LogicalPlan): Aggregate =
    Aggregate(grouping, aggregates, child)

  /** `a` with the fields named replaced. */
  def aggregateWith(a: Aggregate)(aggregateExpressions: Seq[NamedExpression] = a.aggregateExpressions,
      child: LogicalPlan = a.child): Aggregate = a.copy(aggregateExpressions = aggregateExpressions, child = child)

  /** `f` over `child`. */
  def filterWith(f: Filter, child: LogicalPlan): Filter = f.copy(child = child)

  /** `e` with other projections and output, over `child`. */
  def expandWith(e: Expand, projections: Seq[Seq[Expression]], output: Seq[Attribute], child: LogicalPlan): Expand =
    e.copy(projections = projections, output = output, child = child)

  /** The v1 streaming relation `r` reading through `dataSource`. */
  def streamingRelationWith(r: StreamingRelation, dataSource: DataSource): StreamingRelation =
    r.copy(dataSource = dataSource)

  /** The v2 streaming relation `r` reading `table`. */
  def streamingRelationV2With(r: StreamingRelationV2, table: Table): StreamingRelationV2 = r.copy(table = table)

  /**
   * The file relation `r` as one micro-batch of a v1 streaming source reads it (as Spark's file
   * source's `getBatch` does): the same relation, marked streaming.
   */
  def streamingFileRelationOf(r: LogicalRelation): LogicalRelation = r.copy(isStreaming = true)

  /** A micro-batch without rows of a v1 streaming source whose columns are `output`. */
  def emptyStreamingRelation(output: Seq[Attribute]): LocalRelation =
    LocalRelation(output, Nil, isStreaming = true)
}
