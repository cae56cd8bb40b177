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
}
