package sluice.json.internal

import scala.collection.mutable

import org.apache.spark.sql.catalyst.expressions.{
  Alias, Attribute, CreateArray, ExprId, Expression, GetStructField, Inline, SubqueryExpression
}
import org.apache.spark.sql.catalyst.plans.logical.{
  Aggregate, EventTimeWatermark, Expand, Filter, Generate, LogicalPlan, Project, Sort, Window
}
import org.apache.spark.sql.types.StructType

import sluice.spark.SparkNodes

/**
 * Narrows each decoded `from_json` to the fields its query reads, so that the decoder builds no
 * value nobody reads (a Kafka value's JSON usually carries far more than one query uses, and Spark
 * prunes a `from_json` schema only where a single field is taken straight off it).
 *
 * Two places are narrowed, the ones a `from_json` result is named in:
 *  - `Project(..., from_json(...) AS e, ...)`: what the plan reads of `e`;
 *  - `Generate(inline(array(from_json(...))))`, which names each top-level field: what the plan reads
 *    of each of those.
 * A `from_json` anywhere else is decoded whole.
 *
 * What the plan reads of an attribute: the paths of the field extractions (`e.bid.price`) that stop
 * at it, followed through the aliases of projections (`e.bid AS b`, then `b.price`). Anything else
 * reads it whole: the attribute on its own in any expression, the plan's output, and every column
 * that goes into a node this does not know to pass columns by name (a union, which pairs columns by
 * position, a deduplication, a sink, any operator that keeps rows in state: a join among them, whose
 * stored rows a changed query restarted on the checkpoint could read further). A plan with a
 * subquery is left alone: its outer references are not followed.
 *
 * Invariant: a field left out of `decoded` is read nowhere in the plan, and no row holding its null
 * outlives the batch, so the null the decoder puts there is never seen.
 */
private[json] object ReadFields {

  /** What is read of a value: all of it, or some fields of a struct (each with what is read of it). */
  private sealed trait Use
  private case object Whole extends Use
  private final case class Fields(fields: Map[String, Use]) extends Use

  private def merge(a: Use, b: Use): Use = (a, b) match {
    case (Fields(x), Fields(y)) => Fields((x.keySet ++ y.keySet).map { k =>
        k -> ((x.get(k), y.get(k)) match {
          case (Some(u), Some(v)) => merge(u, v)
          case (u, v) => u.orElse(v).get
        })
      }.toMap)
    case _ => Whole
  }

  private def at(path: List[String], use: Use): Use = path.foldRight(use)((name, u) => Fields(Map(name -> u)))

  /** The part of `schema` that `use` reads (the same order); nothing read: no fields. */
  private def narrow(schema: StructType, use: Option[Use]): StructType = use match {
    case None => StructType(Nil)
    case Some(Whole) => schema
    case Some(Fields(read)) => StructType(schema.fields.flatMap { f =>
        read.get(f.name).map { u =>
          f.dataType match {
            case s: StructType => f.copy(dataType = narrow(s, Some(u)))
            case _ => f
          }
        }
      })
  }

  /** Nodes whose columns pass to their output by name, every read of them being in their expressions. */
  private def passesByName(node: LogicalPlan): Boolean = node match {
    case _: Project | _: Filter | _: Generate | _: Aggregate | _: EventTimeWatermark | _: Expand | _: Sort |
        _: Window => true
    case _ => false
  }

  def apply(plan: LogicalPlan): LogicalPlan = {
    def holds(p: Expression => Boolean): Boolean = plan.exists(_.expressions.exists(_.exists(p)))
    if (!holds(_.isInstanceOf[DirectJsonToStructs]) || holds(_.isInstanceOf[SubqueryExpression])) return plan

    val direct = mutable.HashMap.empty[ExprId, Use]
    // alias -> (the attribute it extracts from, the path): what is read of the alias is read there
    val aliases = mutable.HashMap.empty[ExprId, (ExprId, List[String])]
    def note(id: ExprId, use: Use): Unit = direct(id) = direct.get(id).fold(use)(merge(_, use))

    def path(e: Expression): Option[(ExprId, List[String])] = e match {
      case a: Attribute => Some((a.exprId, Nil))
      case g: GetStructField => g.child.dataType match {
          case s: StructType => path(g.child).map { case (id, p) => (id, p :+ s(g.ordinal).name) }
          case _ => None
        }
      case _ => None
    }
    def visit(e: Expression): Unit = path(e) match {
      case Some((id, p)) => note(id, at(p, Whole))
      case None => e.children.foreach(visit)
    }

    plan.output.foreach(a => note(a.exprId, Whole))
    plan.foreach { node =>
      if (!passesByName(node)) node.children.foreach(_.output.foreach(a => note(a.exprId, Whole)))
      node match {
        case p: Project => p.projectList.foreach {
            case a: Alias => path(a.child) match {
                case Some(source) => aliases(a.exprId) = source
                case None => visit(a)
              }
            case e => visit(e)
          }
        case g: Generate => visit(g.generator) // its expressions include the columns it makes
        case _ => node.expressions.foreach(visit)
      }
    }

    val byAttribute = aliases.groupBy(_._2._1)
    val resolved = mutable.HashMap.empty[ExprId, Option[Use]]
    // Aliases refer only to attributes made below them, so this recursion ends.
    def use(id: ExprId): Option[Use] = resolved.getOrElseUpdate(id, {
        val throughAliases = byAttribute.getOrElse(id, Nil).flatMap { case (alias, (_, p)) => use(alias).map(at(p, _)) }
        (direct.get(id).toSeq ++ throughAliases).reduceOption(merge)
      })

    def narrowed(d: DirectJsonToStructs, u: Option[Use]): DirectJsonToStructs = d.copy(decoded = narrow(d.schema, u))

    plan.transformUp {
      case p: Project if p.projectList.exists {
            case Alias(_: DirectJsonToStructs, _) => true
            case _ => false
          } =>
        SparkNodes.project(p.projectList.map {
            case a @ Alias(d: DirectJsonToStructs, _) =>
              a.withNewChildren(Seq(narrowed(d, use(a.exprId)))).asInstanceOf[Alias]
            case e => e
          }, p.child)
      case g: Generate => inlined(g) match {
          case Some(d) if g.generatorOutput.length == d.schema.length =>
            val read = d.schema.fields.zip(g.generatorOutput).flatMap { case (f, a) => use(a.exprId).map(f.name -> _) }
            val target = narrowed(d, Some(Fields(read.toMap)))
            g.transformExpressions { case x: DirectJsonToStructs if x eq d => target }
          case _ => g
        }
    }
  }

  /** The decoded `from_json` of `inline(array(from_json(...)))`, the one way to name its fields as columns. */
  private def inlined(g: Generate): Option[DirectJsonToStructs] = g.generator match {
    case i: Inline => i.child match {
        case c: CreateArray if c.children.length == 1 =>
          c.children.head match {
            case d: DirectJsonToStructs => Some(d)
            case _ => None
          }
        case _ => None
      }
    case _ => None
  }
}
