package sluice.spark

import org.apache.spark.sql.execution.datasources.DataSource

/**
 * A `DataSource` that copies every field of `ds`; a subclass overrides how the source is created.
 *
 * spark-4.2: a ninth field, the user's name for a streaming source.
 */
abstract class DataSourceCopy(ds: DataSource) extends DataSource(ds.sparkSession, ds.className, ds.paths,
    ds.userSpecifiedSchema,
    ds.partitionColumns, ds.bucketSpec, ds.options, ds.catalogTable, ds.userSpecifiedStreamingSourceName)
