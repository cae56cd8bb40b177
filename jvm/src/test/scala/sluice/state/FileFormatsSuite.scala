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

  test("every kind is written in a format it reads, and kinds are unique") {
    FileFormats.all.foreach(f => assert(f.reads.contains(f.current), f.kind))
    assert(FileFormats.all.map(_.kind).distinct.size == FileFormats.all.size)
  }
}
