package sluice.suppress.internal

import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.sql.sluice.ProgressRows
import org.apache.spark.sql.sluice.ProgressRows.Boundaries

/** When an upstream task sends progress rows: each time its largest event time closes a window. */
class ProgressRowsSuite extends AnyFunSuite {

  test("a boundary is crossed exactly when a window's end plus the grace is reached (<=, as the close)") {
    // 10-µs windows [0, 10), [10, 20), ...; grace 2: window [0, 10) closes once stream time reaches 12
    val b = Boundaries.of(startMicros = 20, endMicros = 30, graceMicros = 2)
    val closer = new StreamTimeCloser(None, graceMs = 2)
    closer.observe(0, -101) // a task's first row always sends progress rows
    var last = b.step(-101)
    for (t <- -100L to 100L) {
      val closedBefore = (-200L to 200L by 10).count(closer.isClosed)
      closer.observe(0, t)
      val closedAfter = (-200L to 200L by 10).count(closer.isClosed)
      assert((b.step(t) > last) == (closedAfter > closedBefore), s"at $t")
      last = b.step(t)
    }
  }

  test("windows with an offset and negative times keep their boundaries") {
    val b = Boundaries.of(startMicros = -17, endMicros = -7, graceMicros = 0) // windows ending at 3 mod 10
    assert(b.step(2) == b.step(-6) && b.step(3) == b.step(2) + 1 && b.step(13) == b.step(12) + 1)
  }

  test("a progress row's window is one no event time reaches") {
    val year10000Micros = 253402300800L * 1000000L
    assert(!ProgressRows.isProgress(year10000Micros) && ProgressRows.isProgress(ProgressRows.WindowBaseMicros))
  }
}
