package sluice.conf

import java.util.Locale

import scala.util.Try

import org.apache.spark.network.util.JavaUtils

/** A bad `spark.sluice.*` setting. The message is one line naming the key, the value and what is expected. */
final class SluiceConfException(message: String) extends IllegalArgumentException(message)

/**
 * One `spark.sluice.*` key: its name, default, parser and the form it expects.
 * `parse` returns None when the value does not have the expected form.
 */
final case class ConfEntry[T](key: String, default: T, expected: String, parse: String => Option[T]) {
  def defaultString: String = default.toString
}

/**
 * Every `spark.sluice.*` key, parsed and validated in one place.
 *
 * Values come from SparkConf (driver plugin at startup) or from a session's SQL conf (operators,
 * providers); both are plain string maps, so one `SluiceConf(settings)` serves both.
 */
final class SluiceConf private (val settings: Map[String, String]) {
  import SluiceConf._

  def get[T](entry: ConfEntry[T]): T = entry.key match {
    case StateStoreCacheMaxBytes.key =>
      // The deprecated alias applies only when the new key is absent.
      rawValue(StateStoreCacheMaxBytes).orElse(rawValue(CacheMaxBytesBuffering))
        .map(v => parseOrThrow(entry, v)).getOrElse(entry.default)
    case _ => rawValue(entry).map(v => parseOrThrow(entry, v)).getOrElse(entry.default)
  }

  def stateStoreCacheMaxBytes: Long = get(StateStoreCacheMaxBytes)
  def inputBufferMaxBytes: Long = get(InputBufferMaxBytes)
  def commitIntervalMs: Long = get(CommitIntervalMs)

  private def rawValue(entry: ConfEntry[_]): Option[String] = settings.get(entry.key).map(_.trim)
}

object SluiceConf {
  val Prefix = "spark.sluice."

  private val byteForm = "a byte size: a plain number of bytes or a Spark byte string such as 64m or 1g"
  private val timeForm = "a duration: a plain number of milliseconds or a Spark time string such as 30s"

  private def bytes(name: String, default: Long, min: Long): ConfEntry[Long] =
    ConfEntry(Prefix + name, default, s"$byteForm, at least $min",
      v => parseBytes(v).filter(_ >= min))

  private def millis(name: String, default: Long, min: Long): ConfEntry[Long] =
    ConfEntry(Prefix + name, default, s"$timeForm, at least $min",
      v => parseMillis(v).filter(_ >= min))

  private[sluice] def choice(name: String, default: String, allowed: Seq[String]): ConfEntry[String] =
    ConfEntry(Prefix + name, default, allowed.mkString("one of ", ", ", ""),
      v => Some(v.toLowerCase(Locale.ROOT)).filter(allowed.contains))

  private[sluice] def positiveInt(name: String, default: Int): ConfEntry[Int] =
    ConfEntry(Prefix + name, default, "a positive integer", v => v.toIntOption.filter(_ > 0))

  private[sluice] def string(name: String, default: String): ConfEntry[String] =
    ConfEntry(Prefix + name, default, "a non-empty string", v => Some(v).filter(_.nonEmpty))

  /** Total record-cache bytes per executor, split evenly over its task slots (KIP-63). */
  val StateStoreCacheMaxBytes: ConfEntry[Long] = bytes("statestore.cache.max.bytes", 10485760L, 0L)

  /** Deprecated alias of [[StateStoreCacheMaxBytes]], the name Kafka Streams used before KIP-770. */
  val CacheMaxBytesBuffering: ConfEntry[Long] = bytes("cache.max.bytes.buffering", 10485760L, 0L)

  /** Input bytes admitted per micro-batch and query (KIP-770). */
  val InputBufferMaxBytes: ConfEntry[Long] = bytes("input.buffer.max.bytes", 536870912L, 1L)

  /** How often cached state and emissions are flushed; 0 means at every micro-batch. */
  val CommitIntervalMs: ConfEntry[Long] = millis("commit.interval.ms", 0L, 0L)

  /** Keys whose use is deprecated, with the key that replaces them. */
  val deprecated: Map[String, String] = Map(CacheMaxBytesBuffering.key -> StateStoreCacheMaxBytes.key)

  /** One driver-log warning per deprecated key in use, saying which key wins. */
  def deprecationWarnings(settings: Map[String, String]): Seq[String] =
    deprecated.toSeq.sorted.collect { case (old, replacement) if settings.contains(old) =>
      if (settings.contains(replacement)) s"$old is deprecated and ignored: $replacement is also set and wins"
      else s"$old is deprecated: use $replacement instead"
    }

  // --- record cache (sluice.cache) ---
  /** The provider CachingStateStoreProvider wraps; fixed per checkpoint like the provider class. */
  val StateStoreCacheDelegate: ConfEntry[String] =
    choice("statestore.cache.delegate", "rocksdb", Seq("rocksdb", "hdfs", "in_memory_window"))

  // In-memory window store (KIP-428), read by sluice.windowstore.InMemoryWindowStoreProvider.
  /** Name of the window store, used in messages. */
  val WindowStoreName: ConfEntry[String] = string("windowstore.name", "in-memory-window-store")
  /** Windows starting at or before stream time minus this are dropped; 0 keeps them until Spark evicts them. */
  val WindowStoreRetention: ConfEntry[Long] = millis("windowstore.retention", 0L, 0L)
  /** Window size the store was declared with (validated against retention by the supplier). */
  val WindowStoreWindowSize: ConfEntry[Long] = millis("windowstore.window.size", 0L, 0L)
  /** Grace period the store was declared with (validated against retention by the supplier). */
  val WindowStoreGrace: ConfEntry[Long] = millis("windowstore.grace", 0L, 0L)
  /** A snapshot file is written (by Spark's maintenance thread) every this many versions. */
  val WindowStoreSnapshotInterval: ConfEntry[Int] = positiveInt("windowstore.snapshot.interval", 10)
  val windowStoreEntries: Seq[ConfEntry[_]] = Seq(WindowStoreName, WindowStoreRetention,
    WindowStoreWindowSize, WindowStoreGrace, WindowStoreSnapshotInterval)

  /** Every known key. Feature packages add their keys above and list them here. */
  val entries: Seq[ConfEntry[_]] =
    Seq(StateStoreCacheMaxBytes, CacheMaxBytesBuffering, InputBufferMaxBytes, CommitIntervalMs) ++
    Seq(StateStoreCacheDelegate) ++ windowStoreEntries

  def apply(settings: Iterable[(String, String)]): SluiceConf =
    new SluiceConf(settings.iterator.filter(_._1.startsWith(Prefix)).toMap)

  /** Parses and validates every `spark.sluice.*` key, throwing one exception listing all problems. */
  def validated(settings: Iterable[(String, String)]): SluiceConf = {
    val conf = apply(settings)
    val problems = errors(conf.settings)
    if (problems.nonEmpty) throw new SluiceConfException(problems.mkString("; "))
    conf
  }

  /** One message per bad key: unknown keys (with the closest known key) and values of the wrong form. */
  def errors(settings: Map[String, String]): Seq[String] = {
    val known = entries.map(e => e.key -> e).toMap
    settings.toSeq.sortBy(_._1).flatMap { case (key, value) =>
      known.get(key) match {
        case None =>
          Some(s"Unknown conf key $key (value '$value'); did you mean ${closest(key, known.keys.toSeq)}?")
        case Some(entry) if entry.parse(value.trim).isEmpty =>
          Some(invalid(entry, value))
        case _ => None
      }
    }
  }

  private def invalid(entry: ConfEntry[_], value: String): String =
    s"Invalid value '$value' for ${entry.key}: expected ${entry.expected}"

  private def parseOrThrow[T](entry: ConfEntry[T], value: String): T =
    entry.parse(value).getOrElse(throw new SluiceConfException(invalid(entry, value)))

  def parseBytes(v: String): Option[Long] =
    if (v.trim.startsWith("-")) None else Try(JavaUtils.byteStringAsBytes(v.trim)).toOption

  def parseMillis(v: String): Option[Long] =
    if (v.trim.startsWith("-")) None else Try(JavaUtils.timeStringAsMs(v.trim)).toOption

  private[conf] def closest(key: String, candidates: Seq[String]): String =
    candidates.minBy(c => (editDistance(key, c), c))

  private[conf] def editDistance(a: String, b: String): Int = {
    var prev = Array.tabulate(b.length + 1)(identity)
    for (i <- 1 to a.length) {
      val cur = new Array[Int](b.length + 1)
      cur(0) = i
      for (j <- 1 to b.length) {
        val cost = if (a(i - 1) == b(j - 1)) 0 else 1
        cur(j) = math.min(math.min(cur(j - 1) + 1, prev(j) + 1), prev(j - 1) + cost)
      }
      prev = cur
    }
    prev(b.length)
  }
}
