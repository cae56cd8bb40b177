package sluice.suppress.internal

import java.util.Locale

import org.apache.spark.sql.AnalysisException
import org.apache.spark.sql.catalyst.FunctionIdentifier
import org.apache.spark.sql.catalyst.expressions.{
  Alias, Attribute, Cast, Expression, ExpressionInfo, FunctionTableSubqueryArgumentExpression, NamedExpression
}
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, Project, SubqueryAlias, View}
import org.apache.spark.sql.catalyst.util.IntervalUtils
import org.apache.spark.sql.sluice.DatasetAccess
import org.apache.spark.sql.types.{CalendarIntervalType, DayTimeIntervalType, StringType}
import org.apache.spark.unsafe.types.{CalendarInterval, UTF8String}

import sluice.conf.SluiceConf
import sluice.spark.SparkSessions
import sluice.suppress._

/**
 * `sluice_suppress`, suppress for SQL: a table-valued function over a streaming aggregation,
 * installed by sluice.plugin.SluiceExtensions.
 * {{{
 *   SELECT * FROM sluice_suppress(TABLE(counts), 'until_window_closes' [, buffer] [, grace])
 *   SELECT * FROM sluice_suppress(TABLE(counts), 'until_time_limit', limit, time_col [, buffer])
 *   SELECT * FROM sluice_suppress(TABLE(counts), 'until_wall_clock_time_limit', limit [, buffer])
 * }}}
 * `grace` (KIP-328's grace period, at most the watermark delay; without it the grace is the delay)
 * is an interval; given without a buffer it must be an interval value (`INTERVAL 5 MINUTES`), since a
 * string there is the buffer. `limit` is an interval (`INTERVAL 30 SECONDS` or '30 seconds'); `buffer` a string of
 * `unbounded` (the default) or `max_records=N` and/or `max_bytes=N` (`64m` accepted), optionally
 * followed by `emit_early_when_full` (the default with a bound), `shut_down_when_full` or
 * `spill_to_disk_when_full` — the same choices as the Python and Scala APIs, which build the same
 * plan (SuppressPlanner.build) and report the same misuse, here as an AnalysisException.
 */
private[sluice] object SuppressTableFunction {
  val Name = "sluice_suppress"

  private val Usage =
    s"$Name(TABLE(<streaming aggregation>), 'until_window_closes' [, buffer] [, <grace interval>]) | " +
      s"$Name(TABLE(...), 'until_time_limit', <interval>, '<time column>' [, buffer]) | " +
      s"$Name(TABLE(...), 'until_wall_clock_time_limit', <interval> [, buffer]); buffer: 'unbounded' or " +
      "'max_records=N max_bytes=N [emit_early_when_full|shut_down_when_full|spill_to_disk_when_full]'"

  private val Info = new ExpressionInfo(getClass.getName, null, Name,
    s"$Usage - Suppresses the updates of a streaming aggregation (KIP-328) as the mode says.",
    "", "", "", "", "", "", "")

  /** For SparkSessionExtensions.injectTableFunction. */
  val description: (FunctionIdentifier, ExpressionInfo, Seq[Expression] => LogicalPlan) =
    (FunctionIdentifier(Name), Info, build)

  private def analysisError(msg: String): AnalysisException = DatasetAccess.analysisError(msg)

  private def fail(msg: String): Nothing = throw analysisError(s"$Name: $msg. Usage: $Usage")

  private def build(args: Seq[Expression]): LogicalPlan = {
    val input = args.headOption match {
      case Some(t: FunctionTableSubqueryArgumentExpression) => t.plan
      case _ => fail("the first argument must be TABLE(<view or query>) naming a streaming aggregation")
    }
    val rest = args.drop(1)
    if (rest.isEmpty) fail("the suppression mode is missing")
    val (suppressed, timeCol) = mode(rest.head) match {
      case "until_window_closes" =>
        arity(rest, 1, 3)
        // One argument after the mode: the grace if it is an interval value, else the buffer.
        val (bufferArg, graceArg) =
          if (rest.size == 2 && isInterval(rest(1))) (None, Some(rest(1))) else (rest.lift(1), rest.lift(2))
        val grace = graceArg.map(millis(_, "grace period"))
        buffer(bufferArg) match {
          case strict: StrictBufferConfig =>
            (grace.fold(Suppressed.untilWindowCloses(strict))(g => Suppressed.untilWindowCloses(strict, g)), None)
          case eager => fail(s"until_window_closes emits only final results, so its buffer may not emit early " +
              s"($eager): add shut_down_when_full or spill_to_disk_when_full, or use 'unbounded'")
        }
      case "until_time_limit" =>
        arity(rest, 3, 4)
        (Suppressed.untilTimeLimit(millis(rest(1)), buffer(rest.lift(3))), Some(string(rest(2), "time column")))
      case "until_wall_clock_time_limit" =>
        arity(rest, 2, 3)
        (Suppressed.untilWallClockTimeLimit(millis(rest(1)), buffer(rest.lift(2))), None)
      case other => fail(s"unknown mode '$other'")
    }
    val session = SparkSessions.active
    try {
      SuppressPlanner.ofPlan(session, unwrapView(input), suppressed, timeCol)
    } catch {
      case e: SuppressUsageException => throw analysisError(s"$Name: ${e.getMessage}")
    }
  }

  /** A view's plan as the query it was made from: a SQL view's plan carries a projection that
   *  casts each column to its stored type, which (for an unchanged aggregation) changes nothing. */
  private def unwrapView(plan: LogicalPlan): LogicalPlan = plan match {
    case s: SubqueryAlias => unwrapView(s.child)
    case v: View => unwrapView(v.child)
    case p: Project if p.projectList.forall(keepsColumn) => unwrapView(p.child)
    case p => p
  }

  private def keepsColumn(e: NamedExpression): Boolean = e match {
    case _: Attribute => true
    case Alias(c: Cast, name) => c.child.dataType == c.dataType &&
      (c.child match { case a: Attribute => a.name == name; case _ => false })
    case _ => false
  }

  private def arity(rest: Seq[Expression], min: Int, max: Int): Unit =
    if (rest.size < min || rest.size > max) {
      fail(s"${rest.size + 1} arguments for mode '${mode(rest.head)}', which takes ${min + 1} to ${max + 1}")
    }

  private def constant(e: Expression, what: String): Any = {
    if (!e.foldable) fail(s"the $what must be a constant, got ${e.sql}")
    e.eval()
  }

  private def string(e: Expression, what: String): String = {
    if (e.dataType != StringType) fail(s"the $what must be a string, got ${e.sql}")
    Option(constant(e, what)).map(_.toString).getOrElse(fail(s"the $what is null"))
  }

  private def mode(e: Expression): String = string(e, "mode").trim.toLowerCase(Locale.ROOT)

  private def isInterval(e: Expression): Boolean = e.dataType match {
    case _: DayTimeIntervalType | CalendarIntervalType => true
    case _ => false
  }

  private def millis(e: Expression, what: String = "time limit"): Long = {
    val interval: CalendarInterval = e.dataType match {
      case _: DayTimeIntervalType =>
        val micros = constant(e, what).asInstanceOf[Long]
        new CalendarInterval(0, 0, micros)
      case CalendarIntervalType => constant(e, what).asInstanceOf[CalendarInterval]
      case StringType =>
        val s = string(e, what)
        try IntervalUtils.stringToInterval(UTF8String.fromString(s))
        catch {
          case _: IllegalArgumentException | _: org.apache.spark.SparkException => fail(s"'$s' is not an interval")
        }
      case other => fail(s"the $what must be an interval such as INTERVAL 30 SECONDS, got ${other.sql}")
    }
    if (interval.months != 0) fail(s"the $what must not use months or years: $interval")
    val ms = interval.days * 86400000L + interval.microseconds / 1000L
    if (ms < 0) fail(s"the $what must not be negative: $interval")
    ms
  }

  private def buffer(arg: Option[Expression]): BufferConfig = {
    val tokens = arg.map(string(_, "buffer")).getOrElse("unbounded")
      .toLowerCase(Locale.ROOT).split("[,\\s]+").filter(_.nonEmpty).toSeq
    var records = Long.MaxValue
    var bytes = Long.MaxValue
    var whenFull: Option[String] = None
    def number(t: String, v: String, parse: String => Long): Long = {
      val n =
        try parse(v)
        catch { case _: NumberFormatException => fail(s"'$t' needs a number") }
      if (n < 0) fail(s"'$t' must not be negative")
      n
    }
    tokens.foreach {
      case "unbounded" =>
      case t if t.startsWith("max_records=") => records = number(t, t.stripPrefix("max_records="), _.toLong)
      case t if t.startsWith("max_bytes=") =>
        bytes = number(t, t.stripPrefix("max_bytes="),
          v => SluiceConf.parseBytes(v).getOrElse(throw new NumberFormatException(v)))
      case t @ ("emit_early_when_full" | "shut_down_when_full" | "spill_to_disk_when_full") =>
        if (whenFull.nonEmpty) fail(s"the buffer has two when-full choices: ${whenFull.get} and $t")
        whenFull = Some(t)
      case t => fail(s"unknown buffer setting '$t'")
    }
    if (tokens.contains("unbounded") && (records != Long.MaxValue || bytes != Long.MaxValue)) {
      fail("the buffer is either 'unbounded' or bounded by max_records/max_bytes, not both")
    }
    val bounded = records != Long.MaxValue || bytes != Long.MaxValue
    val base: BufferConfig =
      if (bounded) EagerBufferConfig(records, bytes) else BufferConfig.unbounded()
    whenFull match {
      case Some("emit_early_when_full") if !bounded => fail("emit_early_when_full needs max_records or max_bytes")
      case Some("emit_early_when_full") => base.emitEarlyWhenFull()
      case Some("shut_down_when_full") => base.shutDownWhenFull()
      case Some("spill_to_disk_when_full") => base.spillToDiskWhenFull()
      case _ => base
    }
  }
}
