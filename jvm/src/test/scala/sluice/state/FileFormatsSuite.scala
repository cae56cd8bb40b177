package sluice.state

import java.nio.charset.StandardCharsets.UTF_8

import org.scalatest.funsuite.AnyFunSuite

class FileFormatsSuite extends AnyFunSuite {
  private val marker = FileFormat("test marker", current = 2, reads = Seq(1, 2))

  test("a text file reads back as written; one without the header (sluice 0.1.0) is format 1") {
    assert(new String(marker.textBytes("hdfs\n"), UTF_8) == "sluice-format 2\nhdfs\n")
    assert(marker.readText("f", marker.textBytes("hdfs\n")) == "hdfs\n")
    assert(marker.readText("f", "hdfs".getBytes(UTF_8)) == "hdfs")
    val onlyTwo = FileFormat("test marker", current = 2, reads = Seq(2))
    val e = intercept[SluiceFileFormatException](onlyTwo.readText("/c/m", "hdfs".getBytes(UTF_8)))
    assert(e.getMessage == "/c/m is a sluice test marker of format 1, but this sluice reads format 2")
  }

  test("a newer or garbled version fails in one line naming the file, the version found and those read") {
    val newer = intercept[SluiceFileFormatException](marker.readText("/c/m", "sluice-format 3\nx".getBytes(UTF_8)))
    assert(newer.getMessage == "/c/m is a sluice test marker of format 3, but this sluice reads formats 1, 2: " +
      "it was written by a newer sluice; run that release (or a later one) on this checkpoint")
    val garbled = intercept[SluiceFileFormatException](marker.readText("/c/m", "sluice-format two".getBytes(UTF_8)))
    assert(garbled.getMessage == "/c/m is a sluice test marker of format 'two', but this sluice reads formats 1, 2")
    intercept[SluiceFileFormatException](marker.check("/c/m", 0))
    marker.check("/c/m", 1)
  }

  private val checksummed = FileFormat("test marker", current = 2, reads = Seq(1, 2), textChecksumFrom = 2)

  test("from textChecksumFrom on, a text file ends with the CRC-32 of what precedes it; earlier ones still read") {
    val bytes = checksummed.textBytes("1000\nsuppress operator 1000 runs fused\n")
    val text = new String(bytes, UTF_8)
    val body = "sluice-format 2\n1000\nsuppress operator 1000 runs fused\n"
    assert(text == body + f"crc32 ${FileFormats.crc32(body.getBytes(UTF_8))}%08x\n")
    assert(checksummed.readText("f", bytes) == "1000\nsuppress operator 1000 runs fused\n")
    assert(checksummed.readText("f", checksummed.textBytes("2")) == "2\n") // a line is ended before the checksum
    assert(checksummed.readText("f", "sluice-format 1\nhdfs\n".getBytes(UTF_8)) == "hdfs\n")
    assert(checksummed.readText("f", "hdfs\n".getBytes(UTF_8)) == "hdfs\n")
  }

  test("every kind's file flipped at any byte, or cut at any length, is refused in one line naming it") {
    for (kind <- FileFormats.all if kind.textChecksumFrom <= kind.current) {
      val original = kind.textBytes("rocksdb\n")
      val flips = for (i <- original.indices; m <- Seq(0x01, 0x80, 0xff))
        yield s"byte $i ^ $m" -> original.updated(i, (original(i) ^ m).toByte)
      val cuts = (0 until original.length).map(n => s"cut to $n bytes" -> original.take(n))
      for ((how, bytes) <- flips ++ cuts) {
        val e = intercept[SluiceFileFormatException] {
          val read = kind.readText("/c/state/0/0/m", bytes)
          fail(s"${kind.kind}, $how: read as '$read'")
        }
        assert(e.getMessage.startsWith("/c/state/0/0/m is a"), s"${kind.kind}, $how: ${e.getMessage}")
        assert(!e.getMessage.contains("\n"), s"${kind.kind}, $how")
      }
    }
  }

  test("every kind is written in a format it reads, and kinds are unique") {
    FileFormats.all.foreach(f => assert(f.reads.contains(f.current), f.kind))
    assert(FileFormats.all.map(_.kind).distinct.size == FileFormats.all.size)
  }
}
