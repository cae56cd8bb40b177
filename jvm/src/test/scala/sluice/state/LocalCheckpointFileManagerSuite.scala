package sluice.state

import java.io.File
import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.Files

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileAlreadyExistsException, Path}
import org.scalatest.funsuite.AnyFunSuite

import sluice.spark.CheckpointTypes.CheckpointFileManager
import sluice.spark.SparkSessionConf

class LocalCheckpointFileManagerSuite extends AnyFunSuite {
  private def ours(dir: File): CheckpointFileManager = {
    val conf = new Configuration()
    conf.set(SparkSessionConf.CheckpointFileManagerKey, classOf[LocalCheckpointFileManager].getName)
    CheckpointFileManager.create(new Path(dir.toURI), conf)
  }

  private def sparks(dir: File): CheckpointFileManager =
    CheckpointFileManager.create(new Path(dir.toURI), new Configuration())

  /** Writes as Spark's metadata log does: cancel on any failure (`fail` makes one after the text). */
  private def write(fm: CheckpointFileManager, file: File, text: String, overwrite: Boolean,
      fail: Boolean = false): Unit = {
    fm.mkdirs(new Path(file.getParentFile.toURI)) // Spark's own manager needs the directory
    val out = fm.createAtomic(new Path(file.toURI), overwrite)
    try {
      out.write(text.getBytes(UTF_8))
      if (fail) throw new IllegalStateException("failed mid-write")
      out.close()
    } catch {
      case e: Throwable => out.cancel(); throw e
    }
  }

  private def read(fm: CheckpointFileManager, file: File): String = {
    val in = fm.open(new Path(file.toURI))
    try new String(in.readAllBytes(), UTF_8)
    finally in.close()
  }

  private def onDisk(dir: File): Seq[String] = Option(dir.list()).map(_.toSeq.sorted).getOrElse(Nil)

  test("Spark builds sluice's manager from the setting, and Spark's own without it") {
    val dir = Files.createTempDirectory("ckpt").toFile
    assert(ours(dir).isInstanceOf[LocalCheckpointFileManager])
    assert(!sparks(dir).isInstanceOf[LocalCheckpointFileManager])
  }

  test("a file appears whole when its stream closes, without a checksum, and Spark's manager reads it") {
    val dir = Files.createTempDirectory("ckpt").toFile
    val file = new File(dir, "offsets/0")
    val fm = ours(dir)
    val out = fm.createAtomic(new Path(file.toURI), false)
    out.write("v1".getBytes(UTF_8))
    assert(!file.exists(), "visible before close")
    out.close()
    assert(onDisk(file.getParentFile) == Seq("0"))
    assert(read(sparks(dir), file) == "v1" && read(fm, file) == "v1")
    assert(fm.exists(new Path(file.toURI)) && fm.list(new Path(file.getParentFile.toURI)).map(
      _.getPath.getName).toSeq == Seq("0"))
  }

  test("without overwrite an existing file is kept and Hadoop's FileAlreadyExistsException thrown") {
    val dir = Files.createTempDirectory("ckpt").toFile
    val file = new File(dir, "commits/3")
    write(sparks(dir), file, "first", overwrite = false)
    val fm = ours(dir)
    val out = fm.createAtomic(new Path(file.toURI), false)
    out.write("second".getBytes(UTF_8))
    intercept[FileAlreadyExistsException](out.close())
    out.cancel() // what Spark's metadata log does next: nothing is left to undo
    assert(read(sparks(dir), file) == "first")
    assert(onDisk(file.getParentFile) == Seq(".3.crc", "3"), "the first file and its checksum only")
  }

  test("with overwrite a file Spark's manager wrote is replaced and its stale checksum dropped") {
    val dir = Files.createTempDirectory("ckpt").toFile
    val file = new File(dir, "state/0/0/1.delta")
    write(sparks(dir), file, "old", overwrite = true)
    assert(onDisk(file.getParentFile) == Seq(".1.delta.crc", "1.delta"))
    write(ours(dir), file, "new and longer", overwrite = true)
    assert(onDisk(file.getParentFile) == Seq("1.delta"))
    assert(read(sparks(dir), file) == "new and longer")
  }

  test("a cancelled or failed write leaves nothing behind") {
    val dir = Files.createTempDirectory("ckpt").toFile
    val file = new File(dir, "offsets/7")
    val fm = ours(dir)
    val out = fm.createAtomic(new Path(file.toURI), true)
    out.write("partial".getBytes(UTF_8))
    out.cancel()
    out.close()
    assert(onDisk(file.getParentFile).isEmpty)
    intercept[IllegalStateException](write(fm, file, "x", overwrite = true, fail = true))
    assert(onDisk(file.getParentFile).isEmpty)
  }

  test("deleting through either manager removes the file and its checksum") {
    val dir = Files.createTempDirectory("ckpt").toFile
    val file = new File(dir, "commits/1")
    write(sparks(dir), file, "a", overwrite = false)
    ours(dir).delete(new Path(file.toURI))
    assert(onDisk(file.getParentFile).isEmpty)
  }

  test("another manager of the user's is refused, naming both settings") {
    val key = SparkSessionConf.CheckpointFileManagerKey
    assert(LocalCheckpointFileManager.refusal(Map.empty).isEmpty)
    assert(LocalCheckpointFileManager.refusal(Map(key -> classOf[LocalCheckpointFileManager].getName)).isEmpty)
    val m = LocalCheckpointFileManager.refusal(Map(("spark.hadoop." + key) -> "com.example.S3Manager"))
    assert(m.exists(s =>
        s.contains("spark.sluice.checkpoint.local.direct=true") &&
        s.contains(s"spark.hadoop.$key=com.example.S3Manager")), m)
  }
}
