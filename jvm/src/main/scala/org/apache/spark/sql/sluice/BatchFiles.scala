package org.apache.spark.sql.sluice

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.hadoop.mapreduce.{Job, JobID, TaskAttemptID, TaskID, TaskType}
import org.apache.hadoop.mapreduce.lib.output.FileOutputFormat
import org.apache.hadoop.mapreduce.task.TaskAttemptContextImpl

import org.apache.spark.TaskContext
import org.apache.spark.broadcast.Broadcast
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.execution.datasources.{DataSource, FileFormat, OutputWriter, OutputWriterFactory}
import org.apache.spark.sql.execution.datasources.v2.FileDataSourceV2
import org.apache.spark.sql.types.{DataType, StructType}
import org.apache.spark.util.SerializableConfiguration

/**
 * Files a task writes itself with one of Spark's file formats (the writers behind
 * `df.write.format(...)`), outside Spark's write commit protocol: each task writes one file under a
 * hidden name and renames it into place when its rows are all written, replacing a file of the same
 * name. Callers name files so that a rerun of the same work writes the same names, which makes the
 * write idempotent. Spark's `FileFormat` and writer factory are internal to Spark, hence here.
 */
object BatchFiles {

  /** The file format `name` resolves to, or why it is not one tasks can write. */
  def fileFormat(session: SparkSession, name: String): Either[String, FileFormat] = {
    val cls: Either[String, Class[_]] =
      try Right(DataSource.lookupDataSource(name, session.sessionState.conf))
      catch { case e: Exception => Left(s"Spark finds no data source '$name' (${e.getMessage.linesIterator.next()})") }
    cls.flatMap { c =>
      val instance = c.getDeclaredConstructor().newInstance()
      instance match {
        case f: FileFormat => Right(f)
        case v2: FileDataSourceV2 => Right(v2.fallbackFileFormat.getDeclaredConstructor().newInstance())
        case _ => Left(s"'$name' (${c.getName}) is not a Spark file format")
      }
    }
  }

  /** The Hadoop configuration of `session` with the data source `options` applied, for file system calls. */
  def hadoopConf(session: SparkSession, options: Map[String, String]): Configuration =
    session.sessionState.newHadoopConfWithOptions(options)

  /** The first field of `schema` (name and type) that `format` cannot write, if any. */
  def unsupportedField(format: FileFormat, schema: StructType): Option[(String, DataType)] =
    schema.fields.find(f => !format.supportDataType(f.dataType)).map(f => (f.name, f.dataType))

  /**
   * Prepared on the driver, once per query run: files of `schema` in `format` with `options`. The
   * Hadoop configuration the format prepared is broadcast, so that each task fetches it once per
   * executor rather than with every task.
   */
  def prepare(session: SparkSession, format: FileFormat, options: Map[String, String], schema: StructType,
      base: Path): Writer = {
    val job = Job.getInstance(session.sessionState.newHadoopConfWithOptions(options))
    job.setOutputKeyClass(classOf[Void])
    job.setOutputValueClass(classOf[InternalRow])
    FileOutputFormat.setOutputPath(job, base)
    val factory = format.prepareWrite(session, job, options, schema)
    new Writer(factory, session.sparkContext.broadcast(new SerializableConfiguration(job.getConfiguration)), schema)
  }

  /** What each task needs to write its file. */
  final class Writer private[BatchFiles] (factory: OutputWriterFactory,
      conf: Broadcast[SerializableConfiguration], schema: StructType)
    extends Serializable {

    /**
     * Removes the files under `dir` whose names start with `prefix`, complete or not (a killed task
     * leaves its hidden file behind): a rerun of the same work calls it, on the driver, before it
     * writes.
     */
    def removeWritten(dir: Path, prefix: String): Unit = {
      val fs = dir.getFileSystem(conf.value.value)
      if (fs.exists(dir)) {
        fs.listStatus(dir).map(_.getPath).filter { p =>
          p.getName.startsWith(prefix) || p.getName.startsWith(s".$prefix")
        }.foreach(fs.delete(_, false))
      }
    }

    /**
     * Opens, on a task, partition `partition`'s file under `dir`, named from `prefix`; it is in
     * place only once `commit` returns.
     */
    def open(dir: String, prefix: String, partition: Int): File = {
      val tc = TaskContext.get()
      val jobId = new JobID("sluice", tc.stageId())
      val attempt = new TaskAttemptID(new TaskID(jobId, TaskType.MAP, partition), tc.attemptNumber())
      // A copy: the broadcast one is shared by the executor's tasks.
      val hadoopConf = new Configuration(conf.value.value)
      hadoopConf.set("mapreduce.job.id", jobId.toString)
      hadoopConf.set("mapreduce.task.id", attempt.getTaskID.toString)
      hadoopConf.set("mapreduce.task.attempt.id", attempt.toString)
      hadoopConf.setBoolean("mapreduce.task.ismap", true)
      hadoopConf.setInt("mapreduce.task.partition", 0)
      val context = new TaskAttemptContextImpl(hadoopConf, attempt)
      val name = f"$prefix$partition%05d${factory.getFileExtension(context)}"
      // Hidden (leading dot) until complete: Spark's readers skip such files.
      val hidden = new Path(dir, s".$name.${tc.taskAttemptId()}.tmp")
      val file = new File(factory.newInstance(hidden.toString, schema, context), hidden, new Path(dir, name),
        hadoopConf)
      tc.addTaskFailureListener((_, _) => file.abort())
      file
    }
  }

  final class File private[BatchFiles] (writer: OutputWriter, hidden: Path, target: Path,
      conf: Configuration) {
    private var open = true
    def write(row: InternalRow): Unit = writer.write(row)

    /** Closes the file and renames it into place, replacing an earlier attempt's. */
    def commit(): Unit = {
      open = false
      writer.close()
      val fs = target.getFileSystem(conf)
      if (fs.exists(target)) fs.delete(target, false)
      if (!fs.rename(hidden, target)) throw new java.io.IOException(s"could not rename $hidden to $target")
    }

    def abort(): Unit = if (open) {
      open = false
      try writer.close()
      finally {
        val fs = hidden.getFileSystem(conf)
        fs.delete(hidden, false)
      }
    }
  }
}
