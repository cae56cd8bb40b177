package sluice.input

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
}
