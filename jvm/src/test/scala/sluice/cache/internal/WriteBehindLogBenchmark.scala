package sluice.cache.internal

import java.nio.file.Files

import org.apache.hadoop.fs.Path
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection
import org.apache.spark.sql.types.{LongType, StringType, StructField, StructType}
import org.apache.spark.unsafe.types.UTF8String

import sluice.state.StoreFilesSuite

/**
 * What a write-behind log file costs through each StoreFiles path: java.nio on the local file
 * system, and Spark's FileContext checkpoint file manager (the path the log took before). Per path
 * and round, `files` batch versions of one store are written (as held batches commit), read back
 * (as a reload does) and then listed and deleted (as maintenance does), each file timed alone.
 * Rounds alternate the paths' order; the first round warms up and is not reported. Prints the
 * median and mean per file of the best round, in microseconds.
 *
 * Args: files rowsPerFile rounds (defaults 300 50 4):
 * `./dev/sbt "Test/runMain sluice.cache.internal.WriteBehindLogBenchmark 300 50 4"`.
 */
object WriteBehindLogBenchmark {
  private final case class Round(write: Seq[Long], read: Seq[Long], cleanNanos: Long)

  def main(args: Array[String]): Unit = {
    val Array(files, rowsPerFile, rounds) =
      (args.map(_.toInt) ++ Array(300, 50, 4).drop(args.length)).take(3)
    val keyProj = UnsafeProjection.create(StructType(Seq(StructField("k", StringType))))
    val valueProj = UnsafeProjection.create(StructType(Seq(StructField("n", LongType), StructField("s", LongType))))
    val rows = (0 until rowsPerFile).map { i =>
      LoggedRow("default", keyProj(InternalRow(UTF8String.fromString(f"key-$i%06d"))).copy(),
        valueProj(InternalRow(i.toLong, i * 7L)).copy())
    }

    def run(conf: () => org.apache.hadoop.conf.Configuration): Round = {
      val log = new WriteBehindLog(new Path(Files.createTempDirectory("sluice-wb-bench").toUri), conf())
      def timed(f: => Unit): Long = { val t = System.nanoTime(); f; System.nanoTime() - t }
      val write = (1 to files).map(v => timed(log.write(WriteBehindEntry(v, 0L, rows))))
      val read = (1 to files).map(v => timed(assert(log.read(v).exists(_.rows.size == rowsPerFile))))
      val clean = timed(assert(log.deleteBelow(files + 1) == files))
      Round(write, read, clean)
    }

    val results = (0 until rounds).flatMap { r =>
      val order = if (r % 2 == 0) StoreFilesSuite.kinds else StoreFilesSuite.kinds.reverse
      order.map { case (kind, conf) => (r, kind, run(conf)) }
    }.filter(_._1 > 0)

    def median(xs: Seq[Long]): Double = { val s = xs.sorted; s(s.size / 2) / 1000.0 }
    def mean(xs: Seq[Long]): Double = xs.sum / xs.size / 1000.0
    println(f"write-behind log, $files files of $rowsPerFile rows, best of ${rounds - 1} rounds (us per file)")
    println(
      f"${"path"}%-16s ${"write med"}%10s ${"write mean"}%11s ${"read med"}%10s ${"read mean"}%10s ${"list+delete"}%12s")
    StoreFilesSuite.kinds.map(_._1).foreach { kind =>
      val mine = results.filter(_._2 == kind).map(_._3)
      val best = mine.minBy(r => median(r.write) + median(r.read))
      println(f"$kind%-16s ${median(best.write)}%10.0f ${mean(best.write)}%11.0f ${median(best.read)}%10.0f " +
        f"${mean(best.read)}%10.0f ${best.cleanNanos / 1000.0 / files}%12.0f")
    }
  }
}
