package sluice.slicing.internal

import org.apache.spark.sql.catalyst.expressions.{
  Add, Attribute, CreateNamedStruct, Expression, GetStructField,
  KnownNullable, Literal, PreciseTimestampConversion, Subtract
}
import org.apache.spark.sql.types.{DataType, LongType}

/**
 * The rows of Spark's sliding windows, as its analyzer writes them (`TimeWindowing`, where the window
 * size is a multiple of the slide): an Expand whose projections differ only in one column, the
 * window, and whose window in projection i is `named_struct(start, L - d_i, end, L - d_i + size)` in
 * Spark's precise timestamp conversion, with one expression L of the row (the last window start at
 * or before its event time) common to all projections.
 *
 * What slicing needs of this shape, and all it relies on: every window of a row depends on the row
 * only through L, and the first window's start, `L - d_0`, gives L back exactly (a subtraction of a
 * constant in 64-bit arithmetic). So rows with the same first window have the same windows, all of
 * them, and each window can be written as a function of the first window alone ([[fromFirst]]).
 */
private[sluice] final case class SlidingWindows(
    /** The window column's position among the Expand's columns. */
    column: Int,
    /** L: the expression of the row every window is computed from. */
    lastStart: Expression,
    /** d_i: L minus window i's start, in the timestamps' microseconds, in projection order. */
    offsets: Seq[Long],
    /** Each projection's window expression, in projection order. */
    windows: Seq[Expression],
    /** The timestamp type of the window's bounds (timestamp or timestamp_ntz). */
    boundType: DataType) {

  /** d_0: L minus the first window's start. */
  def firstOffset: Long = offsets.head

  /**
   * How far each window starts (and ends) after the first, in projection order: window i of a row is
   * its first window moved by `d_0 - d_i` microseconds (every window has the same size).
   */
  def shiftsFromFirst: Seq[Long] = offsets.map(firstOffset - _)

  /**
   * The window expression of projection `i` rewritten over `first`, an attribute holding the first
   * window of the same row: L replaced by `first.start + d_0`, which equals L (see above).
   */
  def fromFirst(i: Int, first: Attribute): Expression = {
    val start = GetStructField(first, 0, Some(SlidingWindows.Start))
    val l = Add(PreciseTimestampConversion(start, boundType, LongType), Literal(firstOffset, LongType))
    windows(i).transformDown { case e if e.semanticEquals(lastStart) => l }
  }
}

private[sluice] object SlidingWindows {
  val Start = "start"
  val End = "end"

  /**
   * The sliding windows of an Expand with these projections and output, or None where it is not
   * that shape: more than one projection, exactly one column whose expressions are windows over one
   * deterministic L that does not read the window column itself, and every other column the same
   * expression in every projection.
   */
  def of(projections: Seq[Seq[Expression]], output: Seq[Attribute]): Option[SlidingWindows] = {
    if (projections.size < 2 || projections.exists(_.size != output.size)) return None
    val varying = output.indices.filter(j => projections.exists(p => !p(j).semanticEquals(projections.head(j))))
    if (varying.size != 1) return None
    val column = varying.head
    val windows = projections.map(_(column))
    windows.head match {
      case Window(l, _, boundType)
          if l.deterministic && !l.references.contains(output(column)) &&
          windows.forall(w => onlyThrough(w, l)) && projections.head.forall(_.deterministic) =>
        val offsets = windows.collect { case Window(li, d, _) if li.semanticEquals(l) => d }
        if (offsets.size == windows.size && sameSize(windows))
          Some(SlidingWindows(column, l, offsets, windows, boundType))
        else None
      case _ => None
    }
  }

  /** Whether every window ends the same constant after its start (`start + size`). */
  private def sameSize(windows: Seq[Expression]): Boolean =
    windows.map {
      case CreateNamedStruct(Seq(_, start, _, end)) => (strip(start), strip(end)) match {
          case (PreciseTimestampConversion(s, LongType, _),
                PreciseTimestampConversion(Add(e, Literal(size: Long, LongType), _), LongType, _))
              if s.semanticEquals(e) => Some(size)
          case _ => None
        }
      case _ => None
    }.distinct match {
      case Seq(Some(_)) => true
      case _ => false
    }

  private def strip(e: Expression): Expression = e match {
    case KnownNullable(inner) => strip(inner)
    case other => other
  }

  /** Whether `w` reads its row only through `l` (nothing is left to read once every `l` is replaced). */
  private def onlyThrough(w: Expression, l: Expression): Boolean =
    w.deterministic && w.transformDown { case e if e.semanticEquals(l) => Literal(0L, LongType) }.references.isEmpty

  /** `named_struct(start, L - d, end, …)` with the bounds as timestamps: (L, d, the bounds' type). */
  private object Window {
    def unapply(e: Expression): Option[(Expression, Long, DataType)] = e match {
      case CreateNamedStruct(Seq(Literal(s, _), StartBound(l, d, t), Literal(n, _), _))
          if String.valueOf(s) == Start && String.valueOf(n) == End => Some((l, d, t))
      case _ => None
    }
  }

  /** `L - d`, converted from microseconds to a timestamp type; Spark may mark it nullable. */
  private object StartBound {
    def unapply(e: Expression): Option[(Expression, Long, DataType)] = e match {
      case KnownNullable(inner) => unapply(inner)
      case PreciseTimestampConversion(s: Subtract, LongType, t) => s.right match {
          case Literal(d: Long, LongType) => Some((s.left, d, t))
          case _ => None
        }
      case _ => None
    }
  }
}
