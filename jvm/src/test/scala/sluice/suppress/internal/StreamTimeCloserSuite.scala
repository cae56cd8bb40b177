package sluice.suppress.internal

import scala.collection.mutable

import org.scalatest.funsuite.AnyFunSuite

/** The per-row close decision suppress(until_window_closes) makes under the real-time trigger. */
class StreamTimeCloserSuite extends AnyFunSuite {
  test("a window closes when stream time minus grace reaches its end (<=, as Kafka Streams)") {
    val c = new StreamTimeCloser(None, graceMs = 2)
    assert(c.streamTime.isEmpty && !c.isClosed(0))
    c.observe(0, 11)
    assert(!c.isClosed(10)) // 11 - 2 = 9 < 10
    c.observe(0, 12)
    assert(c.isClosed(10) && !c.isClosed(11))
    c.observe(0, 5) // stream time never goes back
    assert(c.streamTime.contains(12) && c.isClosed(10))
  }

  test("the batch watermark closes for an upstream task only once a batch in which it sent nothing ends") {
    val c = new StreamTimeCloser(Some(3), graceMs = 0, upstreams = 2)
    c.observe(0, 10)
    assert(c.closeTime == 3) // task 1 is still at the stored stream time
    c.endBatch(20) // task 1 sent nothing in the batch: it closes at the floor, task 0 at its own clock
    assert(c.closeTime == 10 && c.isClosed(10) && !c.isClosed(11))
    val quiet = new StreamTimeCloser(None, graceMs = 5, upstreams = 2)
    assert(quiet.closeTime == Long.MinValue && !quiet.isClosed(Long.MinValue + 1))
    quiet.endBatch(7)
    assert(quiet.closeTime == 7 && quiet.streamTime.contains(12))
    val busy = new StreamTimeCloser(Some(3), graceMs = 0)
    busy.observe(0, 4)
    busy.endBatch(20) // a task that sent a row is never moved by the watermark
    assert(busy.closeTime == 4)
    busy.endBatch(Long.MinValue)
    assert(busy.closeTime == 4)
  }

  test("draining a backlog, a task far ahead closes nothing the slower task still sends, whatever the watermark") {
    val c = new StreamTimeCloser(None, graceMs = 2, upstreams = 2)
    (0L to 1000L).foreach(t => c.observe(1, t)) // the fast task has sent everything
    (0L to 40L).foreach(t => c.observe(0, t))
    c.endBatch(998) // Spark's watermark: the fast task's time minus the delay
    assert(c.closeTime == 38 && !c.isClosed(39))
    val next = new StreamTimeCloser(c.streamTime, graceMs = 2, upstreams = 2)
    next.observe(0, 41)
    next.endBatch(998) // task 1 sent nothing more: it no longer holds the partition, task 0 still does
    assert(next.closeTime == 39)
  }

  test("a stored stream time survives a restart: closed windows stay closed") {
    val before = new StreamTimeCloser(None, graceMs = 1)
    before.observe(0, 30)
    val after = new StreamTimeCloser(before.streamTime, graceMs = 1)
    assert(after.isClosed(29) && !after.isClosed(30))
  }

  /**
   * Per-row suppression over an update-mode count (each row the aggregate's latest value and the
   * max event time of its window), against the final results computed from all records: for
   * in-order input every window closed by the final stream time is emitted once, with its full count.
   */
  test("per-row release of in-order input emits each closed window once with its final value") {
    val size = 10L
    val grace = 2L
    val records = (0L until 200L).map(t => (s"k${t % 3}", t + (t % 2))) // nearly in order, ties
    val closer = new StreamTimeCloser(None, grace)
    val agg = mutable.Map.empty[(String, Long), (Long, Long)] // (key, window end) -> (count, max ts)
    val buffer = mutable.Map.empty[(String, Long), Long]
    val emitted = mutable.ArrayBuffer.empty[((String, Long), Long)]
    var late = 0
    for ((k, t) <- records) {
      val end = (t / size + 1) * size
      val (n, m) = agg.getOrElse((k, end), (0L, Long.MinValue))
      agg((k, end)) = (n + 1, math.max(m, t))
      if (closer.isClosed(end)) late += 1
      else {
        buffer((k, end)) = n + 1
        closer.observe(0, agg((k, end))._2)
        buffer.keys.filter(w => closer.isClosed(w._2)).toSeq.sortBy(w => (w._2, w._1)).foreach { w =>
          emitted += w -> buffer.remove(w).get
        }
      }
    }
    val finalStream = records.map(_._2).max
    val expected = records.groupBy { case (k, t) => (k, (t / size + 1) * size) }.view.mapValues(_.size.toLong)
      .filter { case ((_, end), _) => end <= finalStream - grace }.toMap
    assert(late == 0)
    assert(emitted.map(_._1).distinct.size == emitted.size, "a window emitted twice")
    assert(emitted.toMap == expected)
  }

  test("with several upstream tasks stream time is the least of their clocks: one running ahead closes nothing") {
    val c = new StreamTimeCloser(None, graceMs = 0, upstreams = 2)
    c.observe(0, 100)
    assert(c.streamTime.isEmpty && !c.isClosed(50)) // task 1 has sent nothing yet
    c.observe(1, 30)
    assert(c.streamTime.contains(30) && c.isClosed(30) && !c.isClosed(31))
    c.observe(1, 120)
    assert(c.streamTime.contains(100))
    val restarted = new StreamTimeCloser(c.streamTime, graceMs = 0, upstreams = 2)
    assert(restarted.isClosed(100) && !restarted.isClosed(101))
    assertThrows[IllegalStateException](c.observe(2, 200))
  }

  /**
   * Two upstream tasks, each sending its own keys' records in event-time order with some disorder,
   * delivered to one suppress partition in many random interleavings (a pipelined shuffle's, which
   * a rerun may change): the final results are the same for every interleaving.
   */
  test("final results do not depend on how the upstream tasks' rows interleave") {
    val size = 10L
    val grace = 3L
    def task(u: Int): Seq[(Int, String, Long)] =
      (0L until 150L).map(t => (u, s"u$u-k${t % 4}", t + (if (t % 5 == 0) -4 else 0)))
    def run(rows: Seq[(Int, String, Long)]): Set[((String, Long), Long)] = {
      val closer = new StreamTimeCloser(None, grace, upstreams = 2)
      val agg = mutable.Map.empty[(String, Long), Long]
      val buffer = mutable.Map.empty[(String, Long), Long]
      val emitted = mutable.ArrayBuffer.empty[((String, Long), Long)]
      for ((u, k, t) <- rows) {
        val end = (t / size + 1) * size
        agg((k, end)) = agg.getOrElse((k, end), 0L) + 1
        if (!closer.isClosed(end)) buffer((k, end)) = agg((k, end))
        closer.observe(u, t)
        buffer.keys.filter(w => closer.isClosed(w._2)).toSeq.foreach(w => emitted += w -> buffer.remove(w).get)
      }
      assert(emitted.map(_._1).distinct.size == emitted.size, "a window emitted twice")
      emitted.toSet
    }
    val rnd = new scala.util.Random(7)
    def interleave(a: Seq[(Int, String, Long)], b: Seq[(Int, String, Long)]): Seq[(Int, String, Long)] = {
      val out = mutable.ArrayBuffer.empty[(Int, String, Long)]
      var (i, j) = (0, 0)
      val bias = rnd.nextDouble() // one task often far ahead of the other
      while (i < a.size || j < b.size) {
        if (j >= b.size || (i < a.size && rnd.nextDouble() < bias)) { out += a(i); i += 1 }
        else { out += b(j); j += 1 }
      }
      out.toSeq
    }
    val first = run(task(0) ++ task(1)) // task 0 drained entirely before task 1
    assert(first.nonEmpty)
    (1 to 50).foreach(_ => assert(run(interleave(task(0), task(1))) == first))
  }
}
