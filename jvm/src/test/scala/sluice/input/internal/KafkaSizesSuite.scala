package sluice.input.internal

import java.nio.file.Files

import org.apache.hadoop.conf.Configuration
import org.scalatest.funsuite.AnyFunSuite

class KafkaSizesSuite extends AnyFunSuite {
  test("size statistics survive a round trip through the checkpoint file; a missing file is empty") {
    val dir = Files.createTempDirectory("sizes").toString
    val file = new SizeFile(dir, new Configuration())
    assert(file.read() == Map.empty)
    val stats = Map("t/0" -> SizeStats(12.5, 1000.0, 90000.0), "a/b/1" -> SizeStats(3, 30, 300))
    file.write(stats)
    assert(new SizeFile(dir, new Configuration()).read() == stats)
    file.write(Map("t/0" -> SizeStats(1, 2, 4)))
    assert(file.read() == Map("t/0" -> SizeStats(1, 2, 4)))
  }

  test("saves happen in the background, the latest statistics win, and flush waits for them") {
    val dir = Files.createTempDirectory("sizes").toString
    val file = new SizeFile(dir, new Configuration())
    (1 to 50).foreach(i => file.save(Map("t/0" -> SizeStats(i, i * 10.0, i * 100.0))))
    file.flush()
    assert(new SizeFile(dir, new Configuration()).read() == Map("t/0" -> SizeStats(50, 500, 5000)))
  }

  test("an unreadable file is ignored rather than failing the query") {
    val dir = Files.createTempDirectory("sizes")
    Files.writeString(dir.resolve(SizeFile.Name), "{not json")
    assert(new SizeFile(dir.toString, new Configuration()).read() == Map.empty)
  }

  test("a file without a format version (sluice 0.1.0) reads as format 1; one of a newer format is ignored") {
    val dir = Files.createTempDirectory("sizes")
    Files.writeString(dir.resolve(SizeFile.Name), """{"t/0":[2.0,20.0,200.0]}""")
    assert(new SizeFile(dir.toString, new Configuration()).read() == Map("t/0" -> SizeStats(2, 20, 200)))
    new SizeFile(dir.toString, new Configuration()).write(Map("t/0" -> SizeStats(1, 2, 4)))
    assert(Files.readString(dir.resolve(SizeFile.Name)).startsWith(
        s"""{"formatVersion":${sluice.state.FileFormats.KafkaRecordSizes.current},"""))
    Files.writeString(dir.resolve(SizeFile.Name), """{"formatVersion":9,"t/0":[2.0,20.0,200.0]}""")
    assert(new SizeFile(dir.toString, new Configuration()).read() == Map.empty)
  }

  test("the sampler takes the source's kafka.* options without the prefix") {
    val opts = new java.util.HashMap[String, String]()
    opts.put("kafka.bootstrap.servers", "h:1")
    opts.put("kafka.security.protocol", "SSL")
    opts.put("subscribe", "t")
    assert(KafkaSampler.kafkaParams(opts) ==
      Map("bootstrap.servers" -> "h:1", "security.protocol" -> "SSL"))
    assert(KafkaSampler.partitionOf("a/b/3").topic == "a/b")
    assert(KafkaSampler.partitionOf("a/b/3").partition == 3)
  }

  test("sampling an unreachable broker gives up within its timeout and samples nothing") {
    val sampler = new KafkaSampler(Map("bootstrap.servers" -> "127.0.0.1:1"), timeoutMs = 1000)
    val t0 = System.nanoTime()
    assert(sampler.sample(Map("t/0" -> (0L, 100L))) == Map.empty)
    assert((System.nanoTime() - t0) / 1e9 < 10)
  }

  test("a partition is a sample only if every point of it was read, so a cut-short sampling adds nothing") {
    val tally = new SampleTally
    for (point <- 0 until KafkaSampler.Points) {
      tally.add("t/0", 1000 + point); tally.pointRead("t/0")
      if (point < KafkaSampler.Points - 1) { tally.add("t/1", 2000); tally.pointRead("t/1") }
    }
    tally.add("t/1", 100000) // the last point's large record, read before the deadline ended it
    val sample = tally.complete(KafkaSampler.Points)
    assert(sample.keySet == Set("t/0"))
    val sizes = (0 until KafkaSampler.Points).map(1000.0 + _)
    assert(sample("t/0") == Sample(SizeStats(sizes.size, sizes.sum, sizes.map(b => b * b).sum), sizes.max.toLong))
  }

  test("sample runs: one from each stratum of the range, short, disjoint, the same for the same range") {
    for ((start, end) <- Seq((0L, 1000L), (20L, 300L), (5L, 9L), (7L, 8L), (0L, Long.MaxValue / 2))) {
      val runs = KafkaSampler.runs("t/2", start, end)
      assert(runs == KafkaSampler.runs("t/2", start, end))
      assert(runs.size == KafkaSampler.Points)
      runs.zipWithIndex.foreach { case ((from, until), i) =>
        val span = BigInt(end - start)
        val (lo, hi) = (start + (span * i / KafkaSampler.Points).toLong,
          start + (span * (i + 1) / KafkaSampler.Points).toLong)
        assert(from >= lo && (from == lo || from < hi) && from < end)
        assert(until >= from && until <= end && until - from <= KafkaSampler.PerPoint)
        runs.lift(i + 1).foreach { case (next, _) => assert(until <= next) }
      }
    }
  }

  test("sample runs do not alias with a period in the data: every tenth record large is seen") {
    // Records produced round-robin over three partitions, every tenth of them large: in partition p
    // the record at offset k is large when (p + 3k) % 10 == 9. Evenly spaced points miss every
    // large record of some ranges: eight of them over partition 2 from offset 60 are 30 apart, all
    // at the same phase. The sample must see one from every start.
    def large(p: Int, k: Long): Boolean = (p + 3 * k) % 10 == 9
    for (p <- 0 until 3; start <- 0L until 250L) {
      val runs = KafkaSampler.runs(s"resize/$p", start, 300L)
      assert(runs.exists { case (from, until) => (from until until).exists(large(p, _)) },
        s"partition $p from $start: $runs")
    }
  }
}
