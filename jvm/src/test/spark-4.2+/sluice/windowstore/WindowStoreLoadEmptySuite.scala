package sluice.windowstore

import java.nio.file.{Files, Paths}

import org.apache.hadoop.conf.Configuration
import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String

/**
 * Spark 4.2+'s state rewrite path (`StatePartitionWriter`, e.g. repartitioning) opens a store with
 * `loadEmpty` at a version and commits the next one from nothing: the window store writes that version
 * as a snapshot alone, so every later load, in this provider or a fresh one, reads what was written
 * and nothing of what the store held before.
 */
class WindowStoreLoadEmptySuite extends AnyFunSuite {
  private val keySchema = StructType(Seq(StructField("k", StringType),
      StructField("window",
        StructType(Seq(StructField("start", TimestampType), StructField("end", TimestampType))))))
  private val valueSchema = StructType(Seq(StructField("count", LongType)))
  private val keyProj = UnsafeProjection.create(keySchema)
  private val valueProj = UnsafeProjection.create(valueSchema)
  private val sec = 1000000L

  private def key(k: String, start: Long): UnsafeRow =
    keyProj(InternalRow(UTF8String.fromString(k), InternalRow(start * sec, (start + 10) * sec))).copy()
  private def value(v: Long): UnsafeRow = valueProj(InternalRow(v)).copy()

  private def provider(dir: String): InMemoryWindowStoreProvider = {
    val p = new InMemoryWindowStoreProvider(Some(WindowStoreSettings("s", 0L, 10)))
    p.init(StateStoreId(dir, 0, 0), keySchema, valueSchema, NoPrefixKeyStateEncoderSpec(keySchema),
      useColumnFamilies = false, new StateStoreConf(new SQLConf), new Configuration())
    p
  }

  private def contents(s: ReadStateStore): Map[String, Long] =
    s.iterator().map(p => s"${p.key.getUTF8String(0)}@${p.key.getStruct(1, 2).getLong(0) / sec}" -> p.value.getLong(0))
      .toMap

  test("a store opened empty commits only what was written, read back by this provider and a fresh one") {
    val dir = Files.createTempDirectory("windowstore-empty").toString
    val p = provider(dir)
    for (v <- 0L until 3L) {
      val s = p.getStore(v)
      s.put(key(s"old$v", v), value(v))
      s.commit()
    }
    // A stale delta of the version about to be rewritten (an earlier run's) must not be read.
    val stale = p.getStore(3)
    stale.put(key("stale", 3), value(-1))
    stale.commit()
    val other = provider(dir) // another instance that last loaded version 3
    assert(contents(other.getReadStore(3)).size == 3)

    val empty = p.getStore(3, None, forceSnapshotOnCommit = false, loadEmpty = true)
    assert(contents(empty).isEmpty)
    empty.put(key("new", 5), value(5))
    assert(empty.commit() == 4)
    val rewritten = Map("new@5" -> 5L)
    assert(contents(p.getReadStore(4)) == rewritten)
    assert(contents(provider(dir).getReadStore(4)) == rewritten)
    assert(contents(other.getReadStore(4)) == rewritten, "a provider that loaded version 3 must not add a delta of 4")
    val store = Paths.get(dir, "0", "0")
    assert(Files.exists(store.resolve("4.wsnapshot")) && !Files.exists(store.resolve("4.wdelta")))
    val next = provider(dir).getStore(4)
    next.put(key("later", 6), value(6))
    next.commit()
    assert(contents(provider(dir).getReadStore(5)) == rewritten + ("later@6" -> 6L))
    assert(contents(provider(dir).getReadStore(3)).size == 3, "earlier versions are untouched")
  }

  test("an empty store aborted leaves no version behind it") {
    val dir = Files.createTempDirectory("windowstore-empty").toString
    val p = provider(dir)
    val s = p.getStore(0)
    s.put(key("a", 0), value(1))
    s.commit()
    val empty = p.getStore(1, None, forceSnapshotOnCommit = false, loadEmpty = true)
    empty.put(key("b", 0), value(2))
    empty.abort()
    assert(contents(p.getReadStore(1)) == Map("a@0" -> 1L))
    assert(!Files.exists(Paths.get(dir, "0", "0", "2.wsnapshot")))
  }
}
