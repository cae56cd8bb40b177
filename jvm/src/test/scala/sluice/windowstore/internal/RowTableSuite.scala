package sluice.windowstore.internal

import scala.util.Random

import org.scalatest.funsuite.AnyFunSuite

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String

class RowTableSuite extends AnyFunSuite {
  private val keyProj = UnsafeProjection.create(StructType(Seq(StructField("k", StringType))))
  private val valueProj = UnsafeProjection.create(StructType(Seq(StructField("v", LongType))))
  private def key(s: String): UnsafeRow = keyProj(InternalRow(UTF8String.fromString(s))).copy()
  private def value(v: Long): UnsafeRow = valueProj(InternalRow(v)).copy()
  private def newTable() = new RowTable(1, 1)
  private def contents(t: RowTable): Map[String, Long] =
    t.entries().map { case (k, v) => k.getUTF8String(0).toString -> v.getLong(0) }.toMap

  test("matches a HashMap under random puts, overwrites and removes, through rehashes") {
    val t = newTable()
    val expected = scala.collection.mutable.HashMap[String, Long]()
    val rnd = new Random(7)
    for (i <- 0 until 50000) {
      // Keys of varying length exercise record sizes and the page boundaries.
      val k = "k" * (1 + rnd.nextInt(20)) + rnd.nextInt(3000)
      if (rnd.nextInt(4) == 0) {
        t.remove(key(k)); expected.remove(k)
      } else {
        t.put(key(k), value(i)); expected(k) = i
      }
    }
    assert(t.size == expected.size)
    assert(contents(t) == expected.toMap)
    expected.keys.take(100).foreach(k => assert(t.get(key(k)).getLong(0) == expected(k)))
    assert(t.get(key("absent")) == null)
  }

  test("rows handed out stay valid after overwrites, removes and compaction") {
    var t = newTable()
    (0 until 2000).foreach(i => t.put(key(s"k$i"), value(i)))
    val held = t.get(key("k5"))
    (0 until 20).foreach(round => (0 until 2000).foreach(i => t.put(key(s"k$i"), value(round * 10000L + i))))
    t.remove(key("k5"))
    assert(t.wantsCompaction, "garbage from 20 rounds of overwrites outweighs the live records")
    val compacted = t.compacted()
    assert(!compacted.wantsCompaction)
    assert(compacted.memoryBytes < t.memoryBytes)
    t = compacted
    assert(held.getLong(0) == 5, "a row read before is unchanged")
    assert(t.get(key("k5")) == null && t.size == 1999)
    assert(t.get(key("k7")).getLong(0) == 190007)
    (0 until 3000).foreach(i => t.put(key(s"k$i"), value(-i)))
    t.remove(key("k9"))
    assert(contents(t) == (0 until 3000).filter(_ != 9).map(i => s"k$i" -> -i.toLong).toMap)
  }

  test("restore points a key back at the record it replaced, or removes it") {
    val t = newTable()
    t.put(key("a"), value(1))
    val first = t.lastWritten
    assert(t.put(key("a"), value(2)) == first)
    val second = t.lastWritten
    t.put(key("b"), value(3))
    val b = t.lastWritten
    t.restore(second, first)
    t.restore(b, RowTable.Absent)
    assert(contents(t) == Map("a" -> 1L))
    val removed = t.remove(key("a"))
    t.restore(removed, removed)
    assert(contents(t) == Map("a" -> 1L))
  }

  test("iteration sees removes made while iterating, also across a rehash") {
    val t = newTable()
    (0 until 100).foreach(i => t.put(key(s"k$i"), value(i)))
    val seen = scala.collection.mutable.ArrayBuffer[String]()
    val it = t.entries()
    var grown = false
    while (it.hasNext) {
      val (k, _) = it.next()
      val name = k.getUTF8String(0).toString
      seen += name
      if (!grown) {
        // Remove the upper half, then force a rehash: the iterator must not return them.
        (50 until 100).foreach(i => if (s"k$i" != name) t.remove(key(s"k$i")))
        (1000 until 3000).foreach(i => t.put(key(s"n$i"), value(i)))
        grown = true
      }
    }
    assert(seen.count(_.startsWith("k")) <= 51)
    assert(seen.filter(_.startsWith("k")).forall(n => n.drop(1).toInt < 50 || n == seen.head))
    assert(seen.distinct.size == seen.size)
  }

  test("entries come in the order their records were written (the pages' order), not the slots'") {
    val t = newTable()
    val names = (0 until 5000).map(i => s"k${(i * 7919) % 5000}")
    names.zipWithIndex.foreach { case (n, i) => t.put(key(n), value(i)) }
    assert(t.entries().map(_._1.getUTF8String(0).toString).toSeq == names)
  }

  test("changes made while iterating: each key live at the start is handed out once, with its value " +
    "then, unless removed first; nothing removed is handed out") {
    for (seed <- 1 to 20) {
      val rnd = new Random(seed)
      val t = newTable()
      val model = scala.collection.mutable.HashMap[String, Long]()
      (0 until 3000).foreach { i =>
        val k = s"k${rnd.nextInt(4000)}"
        t.put(key(k), value(i)); model(k) = i
        if (rnd.nextInt(5) == 0) { val r = s"k${rnd.nextInt(4000)}"; t.remove(key(r)); model.remove(r) }
      }
      val atStart = model.keySet.toSet
      val removedSome = scala.collection.mutable.HashSet[String]()
      val seen = scala.collection.mutable.ArrayBuffer[String]()
      val it = t.entries()
      var step = 0L
      // Late in some runs the table's owner ends the iteration's hearing of changes (a version
      // closing): from then on it checks each record against the table instead.
      val endAt = if (seed % 2 == 0) rnd.nextInt(2000) else -1
      while (it.hasNext) {
        val (k, v) = it.next()
        val name = k.getUTF8String(0).toString
        assert(model.get(name).contains(v.getLong(0)), s"seed $seed: $name handed out with a value it does not have")
        seen += name
        step += 1
        if (step == endAt) t.endIterations()
        rnd.nextInt(8) match {
          // The entry just handed out, removed through the row handed out (Spark's eviction): the
          // table then knows its slot. Removed twice, the second finds nothing.
          case 0 =>
            assert(t.remove(k) != RowTable.Absent); model.remove(name); removedSome += name
            if (rnd.nextBoolean()) assert(t.remove(k) == RowTable.Absent)
          case 6 => // new keys first, enough for a rehash now and then, which moves the slot
            (0 until 50).foreach(j => { val r = s"m$step-$j"; t.put(key(r), value(j)); model(r) = j })
            t.remove(k); model.remove(name); removedSome += name
          case 1 => t.put(k.copy(), value(-step)); model(name) = -step
          case 2 => val r = s"k${rnd.nextInt(4000)}"; t.remove(key(r)); if (model.remove(r).isDefined) removedSome += r
          case 3 => val r = s"k${rnd.nextInt(4000)}"; t.put(key(r), value(1000000 + step)); model(r) = 1000000 + step
          case 4 => val r = s"n$step"; t.put(key(r), value(step)); model(r) = step // a new key
          case _ =>
        }
      }
      assert(seen.distinct.size == seen.size, s"seed $seed: a key handed out twice")
      val missed = atStart -- removedSome -- seen
      assert(missed.isEmpty, s"seed $seed: live all along, never handed out: ${missed.take(5)}")
      assert(contents(t) == model.toMap, s"seed $seed")
    }
  }

  test("a frozen view keeps the entries as of freeze while the writer goes on") {
    val t = newTable()
    (0 until 1000).foreach(i => t.put(key(s"k$i"), value(i)))
    val frozen = t.freeze()
    (0 until 500).foreach(i => t.remove(key(s"k$i")))
    (500 until 1000).foreach(i => t.put(key(s"k$i"), value(-i)))
    (0 until 5000).foreach(i => t.put(key(s"n$i"), value(i))) // rehashes and new pages
    val bytes = new java.io.ByteArrayOutputStream()
    frozen.writeTo(bytes)
    val seen = read(bytes.toByteArray)
    assert(seen == (0 until 1000).map(i => s"k$i" -> i.toLong).toMap)
    assert(t.size == 5500 && t.get(key("k600")).getLong(0) == -600 && t.get(key("k1")) == null)
  }

  /** Records as written by writeTo / writeRecord / writeRemoval, applied in order. */
  private def read(bytes: Array[Byte]): Map[String, Long] = {
    val in = new java.io.ByteArrayInputStream(bytes ++ endMarker)
    val out = scala.collection.mutable.LinkedHashMap[String, Long]()
    val scratch = new Array[Byte](8)
    while (RowTable.readRecord(in, scratch, 1, 1,
        (k, v) => out(k.getUTF8String(0).toString) = v.getLong(0),
        k => out.remove(k.getUTF8String(0).toString), start => out("cleared@" + start) = start)) {}
    out.toMap
  }
  private def endMarker: Array[Byte] = {
    val b = new java.io.ByteArrayOutputStream(); RowTable.writeEnd(b, new Array[Byte](8)); b.toByteArray
  }

  test("records and removals round-trip through the file format") {
    val t = newTable()
    t.put(key("a"), value(1)); val a = t.lastWritten
    t.put(key("bb" * 50), value(2)); val b = t.lastWritten
    val removed = t.remove(key("a"))
    val bytes = new java.io.ByteArrayOutputStream()
    t.writeRecord(bytes, a); t.writeRecord(bytes, b); t.writeRemoval(bytes, removed, new Array[Byte](8))
    RowTable.writeClear(bytes, 42L, new Array[Byte](8))
    assert(read(bytes.toByteArray) == Map("bb" * 50 -> 2L, "cleared@42" -> 42L))
    val firstRecord = 8 + key("a").getSizeInBytes + value(1).getSizeInBytes
    val truncated = new java.io.ByteArrayInputStream(bytes.toByteArray.take(firstRecord - 3))
    intercept[java.io.EOFException](RowTable.readRecord(truncated, new Array[Byte](8), 1, 1, (_, _) => (), _ => (),
        _ => ()))
  }

  test("tables of several slot chunks: rehash, removes, compaction and a frozen view") {
    var t = newTable()
    val n = 100000 // 262144 slots: 8 chunks
    (0 until n).foreach(i => t.put(key(s"k$i"), value(i)))
    assert(t.memoryBytes - t.liveBytes >= 262144L * 8, "the slots of 100000 keys span several chunks")
    (0 until n by 2).foreach(i => t.remove(key(s"k$i")))
    (0 until n by 4).foreach(i => t.put(key(s"k$i"), value(-i)))
    val frozen = t.freeze()
    (1 until n by 2).foreach(i => t.put(key(s"k$i"), value(i + 1))) // garbage for compaction
    t = t.compacted()
    val expected = (0 until n).collect {
      case i if i % 4 == 0 => s"k$i" -> -i.toLong
      case i if i % 2 == 1 => s"k$i" -> (i + 1).toLong
    }.toMap
    assert(contents(t) == expected && t.size == expected.size)
    assert(t.get(key("k2")) == null && t.get(key("k7")).getLong(0) == 8)
    val bytes = new java.io.ByteArrayOutputStream()
    frozen.writeTo(bytes)
    assert(read(bytes.toByteArray) == (0 until n).collect {
      case i if i % 4 == 0 => s"k$i" -> -i.toLong
      case i if i % 2 == 1 => s"k$i" -> i.toLong
    }.toMap)
  }

  test("a record larger than a page gets its own page") {
    val t = newTable()
    val big = "x" * (3 << 20)
    t.put(key(big), value(1))
    t.put(key("small"), value(2))
    assert(t.get(key(big)).getLong(0) == 1 && t.get(key("small")).getLong(0) == 2)
  }
}
