package sluice.windowstore

import java.io.IOException
import java.nio.file.Files

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.scalatest.funsuite.AnyFunSuite

class StoreFilesSuite extends AnyFunSuite {
  private def viaSpark(): Configuration = {
    val conf = new Configuration()
    conf.set("spark.sql.streaming.checkpointFileManagerClass",
      "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager")
    conf
  }

  private val kinds = Seq("local java.nio" -> (() => new Configuration()), "Spark's manager" -> viaSpark _)

  for ((kind, conf) <- kinds) {
    def newFiles(): (java.io.File, StoreFiles) = {
      val dir = Files.createTempDirectory("storefiles").resolve("store").toFile
      val files = StoreFiles(new Path(dir.toURI), conf())
      files.mkdirs()
      (dir, files)
    }
    def read(files: StoreFiles, name: String): String = {
      val in = files.open(name)
      try new String(in.readAllBytes(), "UTF-8") finally in.close()
    }

    test(s"$kind: a written file is listed, read back, replaced and deleted") {
      val (_, files) = newFiles()
      assert(files.list().isEmpty)
      files.write("1.wdelta")(_.write("one".getBytes("UTF-8")))
      assert(files.exists("1.wdelta") && !files.exists("2.wdelta"))
      assert(read(files, "1.wdelta") == "one")
      files.write("1.wdelta")(_.write("again".getBytes("UTF-8")))
      assert(read(files, "1.wdelta") == "again")
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
    assert(StoreFiles(dir, viaSpark()).toString.contains("FileContextBasedCheckpointFileManager"))
  }
}
