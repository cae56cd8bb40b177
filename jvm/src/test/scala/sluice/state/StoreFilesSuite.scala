package sluice.state

import java.io.IOException
import java.nio.file.Files

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.scalatest.funsuite.AnyFunSuite

class StoreFilesSuite extends AnyFunSuite {
  import StoreFilesSuite._

  for ((kind, conf) <- kinds) {
    def newFiles(): (java.io.File, StoreFiles) = {
      val dir = Files.createTempDirectory("storefiles").resolve("store").toFile
      val files = StoreFiles(new Path(dir.toURI), conf())
      files.mkdirs()
      (dir, files)
    }

    test(s"$kind: a written file is listed, read back, replaced and deleted") {
      val (_, files) = newFiles()
      assert(files.list().isEmpty)
      files.write("1.wdelta")(_.write("one".getBytes("UTF-8")))
      assert(files.exists("1.wdelta") && !files.exists("2.wdelta"))
      assert(readAll(files, "1.wdelta") == "one")
      files.write("1.wdelta")(_.write("again".getBytes("UTF-8")))
      assert(readAll(files, "1.wdelta") == "again")
      assert(files.list().filterNot(_.startsWith(".")) == Seq("1.wdelta"))
      files.delete("1.wdelta")
      assert(!files.exists("1.wdelta"))
      assert(files.list().filterNot(_.startsWith(".")).isEmpty)
    }

    test(s"$kind: a failed write leaves neither the file nor a temporary one") {
      val (dir, files) = newFiles()
      val e = intercept[IOException] {
        files.write("2.wdelta") { out => out.write(1); throw new IOException("disk full") }
      }
      assert(e.getMessage == "disk full")
      assert(!files.exists("2.wdelta"))
      assert(Option(dir.list()).map(_.toSeq).getOrElse(Nil).isEmpty, dir.list().mkString(", "))
      val missing = intercept[IOException](StoreFiles.openExisting(files, "2.wdelta", "store"))
      assert(missing.getMessage.contains("2.wdelta is missing"))
    }
  }

  test("the local file system uses java.nio unless a checkpoint file manager is configured") {
    val dir = new Path(Files.createTempDirectory("storefiles").toUri)
    assert(StoreFiles(dir, new Configuration()).toString.startsWith("local files"))
    assert(StoreFiles(dir, throughSpark()).toString.contains("FileContextBasedCheckpointFileManager"))
  }

  test("files Spark's manager wrote are read, replaced and deleted by java.nio, their checksums with them") {
    val dir = Files.createTempDirectory("storefiles").resolve("store").toFile
    def onDisk = dir.list().toSeq.sorted
    val spark = StoreFiles(new Path(dir.toURI), throughSpark())
    spark.mkdirs()
    Seq("1.wdelta", "2.wdelta").foreach(n => spark.write(n)(_.write(n.getBytes("UTF-8"))))
    assert(onDisk == Seq(".1.wdelta.crc", ".2.wdelta.crc", "1.wdelta", "2.wdelta"))
    val local = StoreFiles(new Path(dir.toURI), new Configuration())
    assert(readAll(local, "1.wdelta") == "1.wdelta")
    // A replaced file loses its checksum, which would no longer match: Spark's manager reads it too.
    local.write("2.wdelta")(_.write("two".getBytes("UTF-8")))
    assert(readAll(spark, "2.wdelta") == "two")
    local.delete("1.wdelta")
    assert(onDisk == Seq("2.wdelta"))
  }
}

object StoreFilesSuite {

  /** Hadoop conf that sends the local file system through Spark's FileContext checkpoint file manager. */
  def throughSpark(): Configuration = {
    val conf = new Configuration()
    conf.set("spark.sql.streaming.checkpointFileManagerClass",
      "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager")
    conf
  }

  /** Each way StoreFiles writes: java.nio on the local file system, or Spark's checkpoint file manager. */
  val kinds: Seq[(String, () => Configuration)] =
    Seq("local java.nio" -> (() => new Configuration()), "Spark's manager" -> (() => throughSpark()))

  def readAll(files: StoreFiles, name: String): String = {
    val in = files.open(name)
    try new String(in.readAllBytes(), "UTF-8")
    finally in.close()
  }
}
