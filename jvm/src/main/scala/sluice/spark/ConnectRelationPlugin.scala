package sluice.spark

import java.util.Optional

import org.apache.spark.SparkEnv
import org.apache.spark.connect.proto.Relation
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.connect.planner.SparkConnectPlanner
import org.apache.spark.sql.connect.plugin.RelationPlugin
// Spark Connect's jar carries its own (shaded) protobuf; the relation bytes come from it.
import org.sparkproject.connect.protobuf.{Any => ProtoAny, CodedInputStream}

/**
 * The Spark-facing half of a Spark Connect relation extension: the client sends a `Relation` whose
 * `extension` is a `google.protobuf.Any` of type URL `typeUrl`; this unpacks it and plans any
 * relation nested in it, so the feature's half only decodes its own message and builds its plan.
 */
abstract class ConnectRelationPlugin(typeUrl: String) extends RelationPlugin {

  /**
   * The plan of one extension message (the `Any`'s value). `resolve` plans a serialized
   * `spark.connect.Relation` nested in it, as the server plans any other.
   */
  protected def plan(message: Array[Byte], session: SparkSession, resolve: Array[Byte] => LogicalPlan): LogicalPlan

  final override def transform(relation: Array[Byte], planner: SparkConnectPlanner): Optional[LogicalPlan] = {
    val any = ProtoAny.parseFrom(relation)
    if (any.getTypeUrl != typeUrl) Optional.empty()
    else Optional.of(plan(any.getValue.toByteArray, planner.session,
        bytes => planner.transformRelation(ConnectRelationPlugin.parseRelation(bytes))))
  }
}

object ConnectRelationPlugin {

  /** Parses a relation with the Connect server's own nesting limit (deep plans). */
  private def parseRelation(bytes: Array[Byte]): Relation = {
    val in = CodedInputStream.newInstance(bytes)
    in.setRecursionLimit(SparkEnv.get.conf.getInt("spark.connect.grpc.marshallerRecursionLimit", 1024))
    Relation.parseFrom(in)
  }
}
