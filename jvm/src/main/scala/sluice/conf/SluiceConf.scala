package sluice.conf

import java.util.Locale

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}

/**
 * A bad `spark.sluice.*` setting, or a Spark setting sluice cannot run with. The message is one line
 * naming the key, the value and what is expected.
 */
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
 * Values come from SparkConf (driver plugin at startup), a session's conf (rules planning a query)
 * or [[ConfResolver]] (everything on the task path); all are plain string maps, so one
 * `SluiceConf(settings)` serves all.
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
  def inputFetchMaxBytes: Long = get(InputFetchMaxBytes)
  def commitIntervalMs: Long = get(CommitIntervalMs)

  private def rawValue(entry: ConfEntry[_]): Option[String] = settings.get(entry.key).map(_.trim)
}

object SluiceConf {

  /**
   * The key table, forms, messages and provider names, in `sluice/conf.json` (bundled in the jar).
   * The Python package reads the same file, so names, defaults, expected forms and error texts are
   * defined once; each side's tests check its parsers against the file's vectors.
   */
  private[sluice] val spec: JsonNode =
    new ObjectMapper().readTree(getClass.getResourceAsStream("/sluice/conf.json"))

  val Prefix: String = spec.get("prefix").asText()

  private def message(name: String, args: (String, Any)*): String =
    args.foldLeft(spec.get("messages").get(name).asText()) { case (m, (k, v)) => m.replace(s"{$k}", v.toString) }

  private def form(name: String): JsonNode = spec.get("forms").get(name)

  private def keySpec(name: String): JsonNode = {
    val it = spec.get("keys").elements()
    var found: JsonNode = null
    while (found == null && it.hasNext) { val k = it.next(); if (k.get("name").asText() == name) found = k }
    require(found != null, s"$name is not in sluice/conf.json")
    found
  }

  private def expected(k: JsonNode, formName: String): String = {
    val f = form(formName).get("expected").asText()
    if (k.has("min")) message("at_least", "form" -> f, "min" -> k.get("min").asLong()) else f
  }

  private def bytes(name: String): ConfEntry[Long] = {
    val k = keySpec(name)
    val min = k.get("min").asLong()
    ConfEntry(Prefix + name, k.get("default").asLong(), expected(k, "bytes"), v => parseBytes(v).filter(_ >= min))
  }

  private def millis(name: String): ConfEntry[Long] = {
    val k = keySpec(name)
    val min = k.get("min").asLong()
    ConfEntry(Prefix + name, k.get("default").asLong(), expected(k, "millis"), v => parseMillis(v).filter(_ >= min))
  }

  private def choice(name: String): ConfEntry[String] = {
    val k = keySpec(name)
    val allowed = Seq.tabulate(k.get("values").size())(i => k.get("values").get(i).asText())
    ConfEntry(Prefix + name, k.get("default").asText(),
      form("choice").get("expected").asText().replace("{values}", allowed.mkString(", ")),
      v => Some(v.toLowerCase(Locale.ROOT)).filter(allowed.contains))
  }

  private def positiveInt(name: String): ConfEntry[Int] = {
    val k = keySpec(name)
    ConfEntry(Prefix + name, k.get("default").asInt(), expected(k, "positive_int"), v => v.toIntOption.filter(_ > 0))
  }

  private def boolean(name: String): ConfEntry[Boolean] = {
    val k = keySpec(name)
    ConfEntry(Prefix + name, k.get("default").asBoolean(), expected(k, "boolean"),
      v => v.toLowerCase(Locale.ROOT).toBooleanOption)
  }

  private def string(name: String): ConfEntry[String] = {
    val k = keySpec(name)
    ConfEntry(Prefix + name, k.get("default").asText(), expected(k, "string"), v => Some(v).filter(_.nonEmpty))
  }

  /** Total record-cache bytes per executor, split evenly over its task slots (KIP-63). */
  val StateStoreCacheMaxBytes: ConfEntry[Long] = bytes("statestore.cache.max.bytes")

  /** Deprecated alias of [[StateStoreCacheMaxBytes]], the name Kafka Streams used before KIP-770. */
  val CacheMaxBytesBuffering: ConfEntry[Long] = bytes("cache.max.bytes.buffering")

  /** Input bytes admitted per micro-batch and query (KIP-770). */
  val InputBufferMaxBytes: ConfEntry[Long] = bytes("input.buffer.max.bytes")

  /** What one poll of a Kafka partition may fetch, where the source does not say (0: Kafka's default). */
  val InputFetchMaxBytes: ConfEntry[Long] = bytes("input.fetch.max.bytes")

  /** How often held emissions are flushed; 0 means at every micro-batch. */
  val CommitIntervalMs: ConfEntry[Long] = millis("commit.interval.ms")

  /** Keys whose use is deprecated, with the key that replaces them. */
  val deprecated: Map[String, String] = Map(CacheMaxBytesBuffering.key -> StateStoreCacheMaxBytes.key)

  /** The keys that set `entry`: its own, then its deprecated aliases. */
  def keysOf(entry: ConfEntry[_]): Seq[String] =
    entry.key +: deprecated.toSeq.collect { case (old, replacement) if replacement == entry.key => old }.sorted

  /** One driver-log warning per deprecated key in use, saying which key wins. */
  def deprecationWarnings(settings: Map[String, String]): Seq[String] =
    deprecated.toSeq.sorted.collect {
      case (old, replacement) if settings.contains(old) =>
        if (settings.contains(replacement)) s"$old is deprecated and ignored: $replacement is also set and wins"
        else s"$old is deprecated: use $replacement instead"
    }

  // --- record cache (sluice.cache) ---
  /** The provider CachingStateStoreProvider wraps; fixed per checkpoint like the provider class. */
  val StateStoreCacheDelegate: ConfEntry[String] = choice("statestore.cache.delegate")

  /** State store provider classes by the names sluice's options use (rocksdb, hdfs, in_memory_window). */
  val ProviderClasses: Map[String, String] = {
    val p = spec.get("providers")
    p.fieldNames().asScala.map(n => n -> p.get(n).asText()).toMap
  }

  /** The record cache's provider class (sluice.cache.CachingStateStoreProvider; a name users type). */
  val CachingProviderClass: String = spec.get("caching_provider").asText()

  // --- the other names both languages use (conf.json's "contract"; its class names and Spark's
  // provider key only Python reads: Scala has the classes and Spark's own key, its tests compare) ---
  private def contract: JsonNode = spec.get("contract")

  /** The state operator ids [from, until) of one kind of sluice stateful operator. */
  final case class OperatorIds(from: Long, until: Long)
  private def operatorIds(kind: String): OperatorIds = {
    val r = contract.get("operator_ids").get(kind)
    OperatorIds(r.get("from").asLong(), r.get("until").asLong())
  }
  val SuppressIds: OperatorIds = operatorIds("suppress")
  val EmitCacheIds: OperatorIds = operatorIds("emit_cache")
  val SessionUpdateIds: OperatorIds = operatorIds("session_update")

  /** The type URL of the Spark Connect relation extension that carries `suppress`. */
  val ConnectTypeUrl: String = contract.get("connect_type_url").asText()

  /** The source option bounding one source (KIP-770), and the keys of a bounded source's metrics. */
  val SourceMaxBytesOption: String = contract.get("input").get("source_option").asText()
  val SourceBytesMetric: String = contract.get("input").get("bytes_metric").asText()
  val SourceThrottledMetric: String = contract.get("input").get("throttled_metric").asText()

  /**
   * The streaming source of kept late records: its short name, its options naming the main query's
   * checkpoint and the records' format, and the file beside the records that carries their columns.
   */
  val LateRecordsSource: String = contract.get("late_records").get("source").asText()
  val LateRecordsCheckpointOption: String = contract.get("late_records").get("checkpoint_option").asText()
  val LateRecordsFormatOption: String = contract.get("late_records").get("format_option").asText()
  val LateRecordsSchemaFile: String = contract.get("late_records").get("schema_file").asText()
  val LateCandidatesDir: String = contract.get("late_records").get("candidates_dir").asText()

  // --- suppress (sluice.suppress) ---
  /**
   * Whether an unbounded `untilWindowCloses` directly above a windowed aggregation (the query's only
   * Spark stateful operator) is fused into it: the aggregation emits each window once when it
   * closes, and no suppress buffer keeps a second copy. Read when a query starts.
   */
  val SuppressFused: ConfEntry[Boolean] = boolean("suppress.fused")

  // In-memory window store (KIP-428), read by sluice.windowstore.InMemoryWindowStoreProvider.
  /** Name of the window store, used in messages. */
  val WindowStoreName: ConfEntry[String] = string("windowstore.name")

  /** Windows starting at or before stream time minus this are dropped; 0 keeps them until Spark evicts them. */
  val WindowStoreRetention: ConfEntry[Long] = millis("windowstore.retention")

  /** A snapshot file is written (by Spark's maintenance thread) every this many versions. */
  val WindowStoreSnapshotInterval: ConfEntry[Int] = positiveInt("windowstore.snapshot.interval")
  val windowStoreEntries: Seq[ConfEntry[_]] = Seq(WindowStoreName, WindowStoreRetention, WindowStoreSnapshotInterval)

  // --- JSON decoding (sluice.json) ---
  /** Who parses `from_json`'s input where sluice can: `spark` or `sluice` (read when a query is planned). */
  val JsonDecoder: ConfEntry[String] = choice("json.decoder")
  val JsonDecoderSluice: String = "sluice"

  /** Every known key. Feature packages add their keys above and list them here. */
  val entries: Seq[ConfEntry[_]] =
    Seq(StateStoreCacheMaxBytes, CacheMaxBytesBuffering, InputBufferMaxBytes, InputFetchMaxBytes, CommitIntervalMs) ++
      Seq(StateStoreCacheDelegate, SuppressFused) ++ windowStoreEntries ++ Seq(JsonDecoder)
  require(entries.map(_.key).toSet == spec.get("keys").elements().asScala.map(Prefix + _.get("name").asText()).toSet,
    "every key of sluice/conf.json has an entry here, and no other")

  // --- experimental rewrites (a key's "status" in conf.json) ---
  /** The keys conf.json marks experimental: opt-in rewrites that may change or go. */
  val experimental: Seq[ConfEntry[_]] = entries.filter { e =>
    val k = keySpec(e.key.stripPrefix(Prefix))
    k.has("status") && k.get("status").asText() == "experimental"
  }

  /** The experimental keys `settings` sets to a valid value other than their default, in conf.json's order. */
  def experimentalOn(settings: Map[String, String]): Seq[String] = {
    val conf = apply(settings)
    experimental.filter(e => conf.settings.get(e.key).exists(v => e.parse(v.trim).exists(_ != e.default))).map(_.key)
  }

  /** The driver's one warning line naming the experimental keys that are on, if any is. */
  def experimentalWarning(settings: Map[String, String]): Option[String] =
    Some(experimentalOn(settings)).filter(_.nonEmpty).map(on => message("experimental", "keys" -> on.mkString(", ")))

  // --- keys sluice no longer has (conf.json's "removed") ---
  /**
   * A removed key: its full name, the `configure()` option it had, the release that removed it, what
   * it switched on, why it went, and the marker file it wrote into a state operator's checkpoint
   * directory, if it wrote one.
   */
  final case class RemovedKey(key: String, option: Option[String], version: String, what: String, reason: String,
      marker: Option[String]) {

    /** The one-line error of a setting of this key. */
    def refusal: String = message("removed", "key" -> key, "version" -> version, "reason" -> reason)

    /** The one-line error of a checkpoint whose state operator `operator`, in `dir`, holds the marker. */
    def markerRefusal(operator: Long, checkpoint: String, dir: String): String =
      message("removed_marker", "operator" -> operator, "checkpoint" -> checkpoint, "what" -> what, "key" -> key,
        "marker" -> marker.getOrElse(""), "dir" -> dir, "version" -> version)
  }

  val removed: Seq[RemovedKey] = spec.get("removed").get("keys").elements().asScala.map { k =>
    def opt(f: String) = Option(k.get(f)).map(_.asText())
    RemovedKey(Prefix + k.get("name").asText(), opt("option"), k.get("version").asText(), k.get("what").asText(),
      k.get("reason").asText(), opt("marker"))
  }.toSeq
  require(removed.forall(r => !entries.exists(_.key == r.key)), "a removed key of sluice/conf.json is also a key")

  /** The removed key named `name` (without the prefix). */
  def removedKey(name: String): RemovedKey =
    removed.find(_.key == Prefix + name).getOrElse(throw new IllegalArgumentException(s"$name is not a removed key"))

  def apply(settings: Iterable[(String, String)]): SluiceConf =
    new SluiceConf(settings.iterator.filter(_._1.startsWith(Prefix)).toMap)

  /** Parses and validates every `spark.sluice.*` key, throwing one exception listing all problems. */
  def validated(settings: Iterable[(String, String)]): SluiceConf = {
    val conf = apply(settings)
    val problems = errors(conf.settings)
    if (problems.nonEmpty) throw new SluiceConfException(problems.mkString("; "))
    conf
  }

  /**
   * One message per bad key: removed keys (when and why they went), unknown keys (with the closest
   * known key) and values of the wrong form.
   */
  def errors(settings: Map[String, String]): Seq[String] = {
    val known = entries.map(e => e.key -> e).toMap
    val gone = removed.map(r => r.key -> r).toMap
    settings.toSeq.sortBy(_._1).flatMap { case (key, value) =>
      known.get(key) match {
        case None if gone.contains(key) => Some(gone(key).refusal)
        case None =>
          Some(message("unknown", "key" -> key, "value" -> value, "closest" -> closest(key, known.keys.toSeq)))
        case Some(entry) if entry.parse(value.trim).isEmpty =>
          Some(invalid(entry, value))
        case _ => None
      }
    }
  }

  private def invalid(entry: ConfEntry[_], value: String): String =
    message("invalid", "value" -> value, "key" -> entry.key, "expected" -> entry.expected)

  private def parseOrThrow[T](entry: ConfEntry[T], value: String): T =
    entry.parse(value).getOrElse(throw new SluiceConfException(invalid(entry, value)))

  // The units of conf.json, as the Python side reads them: Spark's own parsers accept more units on
  // some minors than on others (spark-4.3: `kib`), and both languages must accept the same values.
  private val NumberWithUnit = """^([0-9]+)\s*([a-z]*)$""".r
  private def unitTable(form: String, field: String): Map[String, BigInt] = {
    val units = this.form(form).get(field)
    units.fieldNames().asScala.map(u => u -> BigInt(units.get(u).asLong())).toMap
  }
  private lazy val byteUnits = unitTable("bytes", "units")
  private lazy val microUnits = unitTable("millis", "units_in_micros")

  private def parseWithUnits(v: String, units: Map[String, BigInt]): Option[BigInt] =
    v.trim.toLowerCase(java.util.Locale.ROOT) match {
      case NumberWithUnit(n, u) if units.contains(u) => Some(BigInt(n) * units(u))
      case _ => None
    }

  def parseBytes(v: String): Option[Long] =
    parseWithUnits(v, byteUnits).filter(_.isValidLong).map(_.toLong)

  def parseMillis(v: String): Option[Long] =
    parseWithUnits(v, microUnits).map(_ / 1000).filter(_.isValidLong).map(_.toLong)

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
