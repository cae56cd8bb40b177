package org.apache.spark.sql.sluicetest

import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Paths}
import java.util.concurrent.ConcurrentHashMap

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.streaming.StreamingQueryListener
import org.apache.spark.sql.streaming.StreamingQueryListener.{
  QueryProgressEvent, QueryStartedEvent,
  QueryTerminatedEvent
}

/**
 * dev/spark-suites' tally of which state store provider served the stateful queries of a suite run
 * (`spark.sql.streaming.streamingQueryListeners`): a test can pin a provider itself, and then it does
 * not exercise the configuration under test. A query's provider is told from its operators' custom
 * metrics (sluice's record cache and window store report their own); at JVM exit the number of
 * queries per provider goes to the file `-Dsluice.tally.file` names, as `provider count` lines.
 */
class ProviderTally extends StreamingQueryListener {
  override def onQueryStarted(event: QueryStartedEvent): Unit = ()
  override def onQueryTerminated(event: QueryTerminatedEvent): Unit = ()
  override def onQueryProgress(event: QueryProgressEvent): Unit = {
    val ops = event.progress.stateOperators
    if (ops.nonEmpty) {
      val metrics = ops.flatMap(_.customMetrics.keySet.asScala).toSet
      val kind =
        if (metrics.contains("windowStoreSegments")) "sluice-windowstore"
        else if (metrics.contains("cacheHits")) {
          if (metrics.exists(_.startsWith("rocksdb"))) "sluice-cache-rocksdb" else "sluice-cache-hdfs"
        } else if (metrics.exists(_.startsWith("rocksdb"))) "spark-rocksdb"
        else "spark-hdfs-or-other"
      ProviderTally.seen.put(event.progress.runId.toString, kind)
    }
  }
}

object ProviderTally {
  private val seen = new ConcurrentHashMap[String, String]()
  sys.props.get("sluice.tally.file").foreach { file =>
    Runtime.getRuntime.addShutdownHook(new Thread(() => {
      val counts = seen.values().asScala.groupBy(identity).map { case (k, v) => s"$k ${v.size}" }
      Files.write(Paths.get(file), counts.toSeq.sorted.asJava, StandardCharsets.UTF_8)
    }))
  }
}
