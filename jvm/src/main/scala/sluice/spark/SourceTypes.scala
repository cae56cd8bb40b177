package sluice.spark

/**
 * Spark's streaming source and relation classes under the names feature code uses (why aliases:
 * see [[StateStoreTypes]]).
 */
object SourceTypes {
  type Source = org.apache.spark.sql.execution.streaming.Source
  type Offset = org.apache.spark.sql.execution.streaming.Offset
  type LongOffset = org.apache.spark.sql.execution.streaming.runtime.LongOffset
  object LongOffset {
    def apply(offset: Long): LongOffset = org.apache.spark.sql.execution.streaming.runtime.LongOffset(offset)
  }
  type FileStreamSource = org.apache.spark.sql.execution.streaming.runtime.FileStreamSource
  type StreamingRelation = org.apache.spark.sql.execution.streaming.runtime.StreamingRelation
  val StreamingRelation = org.apache.spark.sql.execution.streaming.runtime.StreamingRelation
  type RateStreamMicroBatchStream = org.apache.spark.sql.execution.streaming.sources.RateStreamMicroBatchStream

  /** Spark's `rate` source, by class name (as a DataSource names its provider). */
  val RateStreamProviderClass = "org.apache.spark.sql.execution.streaming.sources.RateStreamProvider"

  type DataSource = org.apache.spark.sql.execution.datasources.DataSource
  val DataSource = org.apache.spark.sql.execution.datasources.DataSource
  type FileFormat = org.apache.spark.sql.execution.datasources.FileFormat
  type HadoopFsRelation = org.apache.spark.sql.execution.datasources.HadoopFsRelation
  val HadoopFsRelation = org.apache.spark.sql.execution.datasources.HadoopFsRelation
  type LogicalRelation = org.apache.spark.sql.execution.datasources.LogicalRelation
  val LogicalRelation = org.apache.spark.sql.execution.datasources.LogicalRelation
  type PartitioningAwareFileIndex = org.apache.spark.sql.execution.datasources.PartitioningAwareFileIndex
}
