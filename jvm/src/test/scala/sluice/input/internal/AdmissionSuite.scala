package sluice.input.internal

import org.scalatest.funsuite.AnyFunSuite

class AdmissionSuite extends AnyFunSuite {
  private def lane(k: String, available: Long, mean: Double, sd: Double = 0.0) =
    Lane(k, available, mean, sd)

  test("lanes with nothing waiting get nothing and are not counted as throttled") {
    val p = Admission.plan(Seq(lane("a", 0, 100), lane("b", 1000, 100)), budget = 10000)
    assert(p.units == Map("b" -> 100L))
    assert(p.throttled == 1)
  }

  test("water-filling: a light lane takes all it has, the busy ones share the rest evenly") {
    val p = Admission.plan(Seq(lane("light", 5, 100), lane("b1", 1000, 100), lane("b2", 1000, 100)), 10500)
    assert(p.units("light") == 5)
    assert(p.units("b1") == 50 && p.units("b2") == 50)
    assert(p.throttled == 2)
    assert(p.expectedBytes <= 10500)
  }

  test("everything fits: nothing throttled") {
    val p = Admission.plan(Seq(lane("a", 10, 100), lane("b", 20, 100)), 1 << 20)
    assert(p.units == Map("a" -> 10L, "b" -> 20L) && p.throttled == 0)
  }

  test("every lane with data progresses by at least one unit, even when one unit exceeds its share") {
    val p = Admission.plan(Seq(lane("a", 10, 1 << 20), lane("b", 10, 1 << 20)), 1000)
    assert(p.units == Map("a" -> 1L, "b" -> 1L))
    assert(p.throttled == 2)
  }

  test("variance leaves a margin; an uncertain mean leaves a larger one") {
    val exact = Admission.plan(Seq(lane("a", 10000, 1000)), 100000).units("a")
    val noisy = Admission.plan(Seq(lane("a", 10000, 1000, 500)), 100000).units("a")
    val fewSamples = Admission.plan(Seq(Lane("a", 10000, 1000, 500, samples = 3)), 100000).units("a")
    assert(exact == 100)
    assert(noisy < exact && noisy >= 85)
    assert(fewSamples < noisy && fewSamples >= 1)
  }

  test("a simulated backlog of mixed sizes stays within 10% of the bound in nearly every batch") {
    val rnd = new scala.util.Random(7)
    val sizes = Array.fill(20000)(100 + rnd.nextInt(100 * 1024 - 100))
    val mean = sizes.sum.toDouble / sizes.length
    val sd = math.sqrt(sizes.map(s => (s - mean) * (s - mean)).sum / sizes.length)
    var pos = 0
    var over = 0
    var batches = 0
    val budget = 4L << 20
    while (pos < sizes.length) {
      val n = Admission.plan(Seq(Lane("p", sizes.length - pos, mean, sd, 1000)), budget).units("p").toInt
      val bytes = sizes.slice(pos, pos + n).map(_.toLong).sum
      if (bytes > budget * 1.1) over += 1
      pos += n
      batches += 1
    }
    assert(over <= batches / 50, s"$over of $batches batches overshot")
  }
}

class KafkaOffsetsSuite extends AnyFunSuite {
  test("positions and replaced positions round-trip through the source's JSON") {
    val json = """{"t":{"0":10,"1":20},"u":{"0":5}}"""
    assert(KafkaOffsets.positions(json) == Map("t/0" -> 10L, "t/1" -> 20L, "u/0" -> 5L))
    val moved = KafkaOffsets.withPositions(json, Map("t/1" -> 15L))
    assert(KafkaOffsets.positions(moved) == Map("t/0" -> 10L, "t/1" -> 15L, "u/0" -> 5L))
  }
}
