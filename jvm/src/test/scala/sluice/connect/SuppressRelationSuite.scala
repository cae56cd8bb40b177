package sluice.connect

import java.io.ByteArrayOutputStream

import org.scalatest.funsuite.AnyFunSuite
import org.sparkproject.connect.protobuf.CodedOutputStream

import sluice.suppress._

/** Decoding of the `sluice.connect.Suppress` extension message (written here with protobuf's encoder). */
class SuppressRelationSuite extends AnyFunSuite {
  private def message(write: CodedOutputStream => Unit): Array[Byte] = {
    val bytes = new ByteArrayOutputStream()
    val out = CodedOutputStream.newInstance(bytes)
    write(out)
    out.flush()
    bytes.toByteArray
  }

  test("every field, in any order, with unknown fields skipped") {
    val bytes = message { out =>
      out.writeString(8, "window.end")
      out.writeString(99, "a field added later")
      out.writeString(2, "until_time_limit")
      out.writeInt64(3, 300000L)
      out.writeInt64(4, 7L)
      out.writeInt64(5, 1L << 40)
      out.writeString(6, "spill_to_disk")
      out.writeString(7, "alerts")
      out.writeByteArray(1, Array[Byte](0, 1, 2, -1))
      out.writeInt64(100, -1L)
    }
    val m = SuppressRelation.decode(bytes)
    assert(m.input.toSeq == Seq[Byte](0, 1, 2, -1))
    assert(m.timeCol.contains("window.end"))
    assert(m.suppressed == UntilTimeLimit(300000L,
      StrictBufferConfig(7L, 1L << 40, BufferFullStrategy.SpillToDisk), Some("alerts")))
  }

  test("absent bounds, name and time column mean none") {
    val m = SuppressRelation.decode(message { out =>
      out.writeByteArray(1, Array[Byte](1))
      out.writeString(2, "until_window_closes")
      out.writeString(6, "shut_down")
    })
    assert(m.suppressed == UntilWindowCloses(BufferConfig.unbounded(), None))
    assert(m.timeCol.isEmpty)
    val eager = SuppressRelation.decode(message { out =>
      out.writeByteArray(1, Array[Byte](1))
      out.writeString(2, "until_wall_clock_time_limit")
      out.writeInt64(3, 0L)
      out.writeInt64(4, 10L)
      out.writeString(6, "emit_early")
    })
    assert(eager.suppressed == UntilWallClockTimeLimit(0L, BufferConfig.maxRecords(10L), None))
  }

  test("an emit-early buffer for until_window_closes is a usage error; a malformed message says so") {
    val e = intercept[SuppressUsageException](SuppressRelation.decode(message { out =>
      out.writeByteArray(1, Array[Byte](1))
      out.writeString(2, "until_window_closes")
      out.writeString(6, "emit_early")
    }))
    assert(e.getMessage.contains("strict buffer config"))
    val noInput =
      intercept[IllegalArgumentException](SuppressRelation.decode(message(_.writeString(2, "until_time_limit"))))
    assert(noInput.getMessage.contains("no input relation"))
    val kind = intercept[IllegalArgumentException](SuppressRelation.decode(message { out =>
      out.writeByteArray(1, Array[Byte](1))
      out.writeString(2, "until_later")
    }))
    assert(kind.getMessage.contains("unknown suppress kind 'until_later'"))
  }

  test("late records: path, format and options (a map), only for until_window_closes") {
    def entry(k: String, v: String): Array[Byte] = message { out => out.writeString(1, k); out.writeString(2, v) }
    val m = SuppressRelation.decode(message { out =>
      out.writeByteArray(1, Array[Byte](1))
      out.writeString(2, "until_window_closes")
      out.writeString(6, "shut_down")
      out.writeString(10, "/late")
      out.writeString(11, "json")
      out.writeByteArray(12, entry("compression", "gzip"))
      out.writeByteArray(12, entry("dateFormat", "yyyy"))
    })
    assert(m.suppressed == UntilWindowCloses(BufferConfig.unbounded(),
      lateRecords = Some(LateRecords("/late", "json", Map("compression" -> "gzip", "dateFormat" -> "yyyy")))))
    val parquet = SuppressRelation.decode(message { out =>
      out.writeByteArray(1, Array[Byte](1))
      out.writeString(2, "until_window_closes")
      out.writeString(10, "/late")
    })
    assert(parquet.suppressed.asInstanceOf[UntilWindowCloses].lateRecords.contains(LateRecords("/late")))
    val limit = intercept[IllegalArgumentException](SuppressRelation.decode(message { out =>
      out.writeByteArray(1, Array[Byte](1))
      out.writeString(2, "until_time_limit")
      out.writeString(10, "/late")
    }))
    assert(limit.getMessage.contains("late_path is only for until_window_closes, not until_time_limit"))
  }

  test("a truncated or garbled message fails that request in one line") {
    val whole = message { out =>
      out.writeByteArray(1, Array[Byte](1, 2, 3))
      out.writeString(2, "until_window_closes")
      out.writeString(10, "/late")
    }
    // Cut at every offset: each prefix either decodes (it ends between fields) or fails clearly.
    for (n <- 1 until whole.length) {
      try SuppressRelation.decode(whole.take(n))
      catch {
        case e: IllegalArgumentException =>
          assert(e.getMessage.startsWith("Invalid sluice suppress relation from the Spark Connect client: "), e)
          assert(!e.getMessage.contains("\n"))
      }
    }
    val garbled = intercept[IllegalArgumentException](SuppressRelation.decode(Array[Byte](0x0a, 0x7f, 1)))
    assert(garbled.getMessage.contains("not a readable protobuf message"))
  }
}
