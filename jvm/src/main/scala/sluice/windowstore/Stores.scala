package sluice.windowstore

import java.time.Duration

import org.apache.spark.sql.SparkSession

import sluice.conf.SluiceConf
import sluice.spark.SparkSessionConf

/** Kafka Streams' `Stores` factory for the store sluice provides to Spark. */
object Stores {
  val ProviderClass: String = classOf[InMemoryWindowStoreProvider].getName
  val ProviderClassKey: String = SparkSessionConf.ProviderClassKey

  /**
   * An in-memory window store (KIP-428): state segmented by window start, windows older than
   * stream time minus `retention` dropped. Validated as Kafka's `Stores.inMemoryWindowStore`.
   */
  def inMemoryWindowStore(
      name: String,
      retention: Duration,
      windowSize: Duration,
      grace: Duration): InMemoryWindowStoreSupplier = {
    def msg(name: String, args: (String, Any)*): String =
      args.foldLeft(SluiceConf.spec.get("windowstore_supplier").get(name).asText()) {
        case (m, (k, v)) => m.replace(s"{$k}", String.valueOf(v))
      }
    if (name == null) throw new NullPointerException(msg("null", "what" -> "name"))
    def millis(d: Duration, what: String): Long = {
      if (d == null) throw new NullPointerException(msg("null", "what" -> what))
      if (d.isNegative) throw new IllegalArgumentException(msg("negative", "what" -> what))
      d.toMillis
    }
    val retentionMs = millis(retention, "retentionPeriod")
    val sizeMs = millis(windowSize, "windowSize")
    val graceMs = millis(grace, "gracePeriod")
    if (sizeMs > retentionMs) {
      throw new IllegalArgumentException(msg("retention_below_size", "name" -> name, "size" -> windowSize,
          "retention" -> retention))
    }
    if (graceMs > retentionMs) {
      throw new IllegalArgumentException(msg("grace_above_retention", "name" -> name, "grace" -> grace,
          "retention" -> retention))
    }
    new InMemoryWindowStoreSupplier(name, retentionMs, sizeMs, graceMs)
  }
}

/** Selects [[InMemoryWindowStoreProvider]] and its settings on a session builder. */
final class InMemoryWindowStoreSupplier private[windowstore] (
    val name: String, val retentionMs: Long, val windowSizeMs: Long, val graceMs: Long) {

  /**
   * The Spark settings this supplier stands for. Window size and grace only bound the retention
   * (checked when the supplier is built, as Kafka does): the store itself needs only the retention.
   */
  def settings: Map[String, String] = Map(
    Stores.ProviderClassKey -> Stores.ProviderClass,
    SluiceConf.WindowStoreName.key -> name,
    SluiceConf.WindowStoreRetention.key -> retentionMs.toString)

  def configure(builder: SparkSession.Builder): SparkSession.Builder =
    settings.foldLeft(builder) { case (b, (k, v)) => b.config(k, v) }

  override def toString: String =
    s"InMemoryWindowStoreSupplier(name=$name, retention=${retentionMs}ms, " +
      s"windowSize=${windowSizeMs}ms, grace=${graceMs}ms)"
}
