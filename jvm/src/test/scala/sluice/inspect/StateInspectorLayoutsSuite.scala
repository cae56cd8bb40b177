package sluice.inspect

import org.json4s._
import org.json4s.jackson.JsonMethods.parse
import org.scalatest.funsuite.AnyFunSuite

/**
 * The layouts `python/sluice/inspect.py` reads checkpoints by, as the features publish them. The
 * values are what checkpoints already hold (operator ids, store and column names), so a change
 * here is a change of the checkpoint format and fails this suite first.
 */
class StateInspectorLayoutsSuite extends AnyFunSuite {
  private implicit val formats: Formats = DefaultFormats
  private lazy val layouts = parse(StateInspector.layouts())

  test("suppress: its operators, its rows' columns, the buffers with a spill store") {
    val s = layouts \ "suppress"
    assert((s \ "operatorName").extract[String] == "suppress")
    assert((s \ "operatorIds").extract[List[Long]] == List(1000L, 2000L))
    assert(Seq("keyColumn", "bufferTimeColumn", "rowColumn").map(k => (s \ k).extract[String]) ==
      Seq("key", "bufferTime", "row"))
    assert((s \ "spillWhenFull").extract[String] == "spill_to_disk")
  }

  test("emission cache: its operators and the columns it adds to the held row") {
    val e = layouts \ "emitCache"
    assert((e \ "operatorName").extract[String] == "emitCache")
    assert((e \ "operatorIds").extract[List[Long]] == List(2000L, 3000L))
    assert((e \ "addedColumns").extract[List[String]] == List("__sluice_emit_insert_ms", "__sluice_emit_seq"))
    assert((e \ "insertTimeColumn").extract[String] == "__sluice_emit_insert_ms")
  }

  test("Spark's own operators lie below every sluice kind; the window store's provider") {
    assert((layouts \ "sparkOperatorIds").extract[List[Long]] == List(0L, 1000L))
    assert(
      (layouts \ "windowStore" \ "providerClass").extract[String] == "sluice.windowstore.InMemoryWindowStoreProvider")
  }
}
