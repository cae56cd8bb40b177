package sluice

import org.apache.spark.sql.catalyst.expressions.AttributeReference
import org.apache.spark.sql.catalyst.plans.logical.{LocalRelation, Project}
import org.apache.spark.sql.types.LongType
import org.apache.spark.sql.sluice.StatefulOperatorSupport
import org.scalatest.funsuite.AnyFunSuite

import sluice.cache.internal.EmitCacheNode
import sluice.suppress.{BufferConfig, Suppressed}
import sluice.suppress.internal.SuppressNode

class StatefulOperatorIdsSuite extends AnyFunSuite {
  private val k = AttributeReference("k", LongType)()
  private def node(child: org.apache.spark.sql.catalyst.plans.logical.LogicalPlan) =
    SuppressNode(Suppressed.untilWindowCloses(BufferConfig.unbounded()), Seq(k), None, 0L, None, child)

  test("operator ids: 1000 + pre-order position among sluice nodes, stable for equal plans") {
    val inner = node(LocalRelation(k))
    val outer = node(Project(Seq(k), inner))
    assert(StatefulOperatorSupport.operatorId(outer, outer).contains(1000L))
    assert(StatefulOperatorSupport.operatorId(inner, outer).contains(1001L))
    // A re-built plan (as after a restart) gives the same ids.
    val rebuilt = node(Project(Seq(k), node(LocalRelation(k))))
    assert(StatefulOperatorSupport.operatorId(rebuilt.child.children.head.asInstanceOf[SuppressNode], outer)
        .contains(1001L))
    assert(StatefulOperatorSupport.operatorId(node(LocalRelation(AttributeReference("x", LongType)())), outer).isEmpty)
  }

  test("each node kind has its own id range: an emission cache does not renumber suppress state") {
    val inner = node(LocalRelation(k))
    val cache = EmitCacheNode(Seq(k), 1000L, Project(Seq(k), inner))
    val outer = node(cache)
    assert(StatefulOperatorSupport.operatorId(outer, outer).contains(1000L))
    assert(StatefulOperatorSupport.operatorId(inner, outer).contains(1001L))
    assert(StatefulOperatorSupport.operatorId(cache, outer).contains(2000L))
  }

}
