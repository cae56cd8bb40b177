package sluice.conf

import org.scalatest.funsuite.AnyFunSuite

class SluiceConfSuite extends AnyFunSuite {
  private def conf(kv: (String, String)*) = SluiceConf.validated(kv)

  test("defaults apply when nothing is set") {
    val c = conf()
    assert(c.stateStoreCacheMaxBytes == 10485760L)
    assert(c.inputBufferMaxBytes == 536870912L)
    assert(c.commitIntervalMs == 0L)
  }

  test("booleans accept true and false in any case; the fused suppress path is on by default") {
    assert(conf().get(SluiceConf.SuppressFused))
    assert(!conf("spark.sluice.suppress.fused" -> "FALSE").get(SluiceConf.SuppressFused))
    assert(conf("spark.sluice.suppress.fused" -> " true ").get(SluiceConf.SuppressFused))
    assert(!conf("spark.sluice.suppress.fused" -> "False").get(SluiceConf.SuppressFused))
  }

  test("byte sizes accept plain numbers and Spark byte strings") {
    assert(conf("spark.sluice.statestore.cache.max.bytes" -> "1024").stateStoreCacheMaxBytes == 1024L)
    assert(conf("spark.sluice.statestore.cache.max.bytes" -> "64m").stateStoreCacheMaxBytes == 64L << 20)
    assert(conf("spark.sluice.input.buffer.max.bytes" -> "1g").inputBufferMaxBytes == 1L << 30)
  }

  test("durations accept milliseconds and Spark time strings") {
    assert(conf("spark.sluice.commit.interval.ms" -> "250").commitIntervalMs == 250L)
    assert(conf("spark.sluice.commit.interval.ms" -> "30s").commitIntervalMs == 30000L)
  }

  test("the deprecated alias is used when the new key is absent, and loses when both are set") {
    assert(conf("spark.sluice.cache.max.bytes.buffering" -> "2m").stateStoreCacheMaxBytes == 2L << 20)
    val both = conf("spark.sluice.cache.max.bytes.buffering" -> "2m", "spark.sluice.statestore.cache.max.bytes" -> "3m")
    assert(both.stateStoreCacheMaxBytes == 3L << 20)
  }

  test("the deprecated alias produces a warning naming the key that wins") {
    assert(SluiceConf.deprecationWarnings(Map.empty).isEmpty)
    val alone = SluiceConf.deprecationWarnings(Map("spark.sluice.cache.max.bytes.buffering" -> "1m"))
    assert(alone == Seq(
      "spark.sluice.cache.max.bytes.buffering is deprecated: use spark.sluice.statestore.cache.max.bytes instead"))
    val both = SluiceConf.deprecationWarnings(Map(
        "spark.sluice.cache.max.bytes.buffering" -> "1m", "spark.sluice.statestore.cache.max.bytes" -> "2m"))
    assert(both.head.contains("spark.sluice.statestore.cache.max.bytes is also set and wins"))
  }

  test("a negative, unparsable or out-of-range value names the key, the value and the expected form") {
    for ((key, value) <- Seq(
        "spark.sluice.statestore.cache.max.bytes" -> "-1",
        "spark.sluice.statestore.cache.max.bytes" -> "lots",
        "spark.sluice.input.buffer.max.bytes" -> "0",
        "spark.sluice.commit.interval.ms" -> "-5s",
        "spark.sluice.commit.interval.ms" -> "soon",
        "spark.sluice.suppress.fused" -> "yes",
        "spark.sluice.suppress.fused" -> "maybe")) {
      val e = intercept[SluiceConfException](conf(key -> value))
      assert(e.getMessage.contains(key), e.getMessage)
      assert(e.getMessage.contains(s"'$value'"), e.getMessage)
      assert(e.getMessage.contains("expected"), e.getMessage)
      assert(!e.getMessage.contains("\n"))
    }
  }

  test("an unknown key under spark.sluice. fails and suggests the closest known key") {
    val e = intercept[SluiceConfException](conf("spark.sluice.statestore.cache.max.byte" -> "1m"))
    assert(e.getMessage.contains("spark.sluice.statestore.cache.max.byte "), e.getMessage)
    assert(e.getMessage.contains("did you mean spark.sluice.statestore.cache.max.bytes?"), e.getMessage)
  }

  test("a removed key fails with when and why it was removed, not as an unknown key") {
    // each key with the release that removed it and a phrase of its reason
    for ((key, version, why) <- Seq(("spark.sluice.window.slicing.state", "0.1.0", "does not promise"),
        ("spark.sluice.aggregate.state.merge", "0.1.0", "does not promise"),
        ("spark.sluice.window.slicing", "0.2.0", "no gain beyond the run-to-run spread"),
        ("spark.sluice.aggregate.partial.hash", "0.2.0", "no gain beyond the run-to-run spread"),
        ("spark.sluice.input.kafka.direct", "0.2.0", "no gain beyond the run-to-run spread"),
        ("spark.sluice.checkpoint.local.direct", "0.2.0", "no gain beyond the run-to-run spread"))) {
      val e = intercept[SluiceConfException](conf(key -> "true"))
      assert(e.getMessage.startsWith(s"$key was removed in sluice $version: "), e.getMessage)
      assert(e.getMessage.endsWith("; remove the setting"), e.getMessage)
      assert(e.getMessage.contains(why) && !e.getMessage.contains("did you mean"), e.getMessage)
      assert(!e.getMessage.contains("\n"))
    }
    // "false" too: the key is gone, whatever its value
    val both = intercept[SluiceConfException](conf("spark.sluice.aggregate.state.merge" -> "false",
        "spark.sluice.window.slicing.state" -> "false", "spark.sluice.json.decoder" -> "sluice"))
    assert(both.getMessage.split("; remove the setting").length == 2, both.getMessage)
    assert(SluiceConf.removed.map(_.key).toSet == Set("spark.sluice.window.slicing.state",
      "spark.sluice.aggregate.state.merge", "spark.sluice.window.slicing", "spark.sluice.aggregate.partial.hash",
      "spark.sluice.input.kafka.direct", "spark.sluice.checkpoint.local.direct"))
    assert(SluiceConf.removedKey("window.slicing.state").marker.contains("_sluice_sliced_state"))
    assert(SluiceConf.removedKey("window.slicing.state").markerRefusal(0, "/c", "/c/state/0") ==
      "sluice: state operator 0 of the checkpoint at /c was written with sliced state (spark.sluice.window.slicing.state; " +
      "its marker file _sluice_sliced_state is in /c/state/0), which sluice 0.1.0 removed: sluice cannot read that " +
      "state any more. Start the query on a new checkpoint")
  }

  test("the experimental keys are conf.json's, and the warning names those set to other than their default") {
    assert(SluiceConf.experimental.map(_.key).toSet == Set("spark.sluice.json.decoder"))
    assert(SluiceConf.experimentalWarning(Map.empty).isEmpty)
    assert(SluiceConf.experimentalWarning(Map("spark.sluice.json.decoder" -> "spark",
          "spark.sluice.suppress.fused" -> "true")).isEmpty)
    assert(SluiceConf.experimentalWarning(Map("spark.sluice.json.decoder" -> "sluice")).contains(
        "sluice: experimental rewrites on: spark.sluice.json.decoder (see docs/features/experimental.md)"))
  }

  test("keys outside spark.sluice. are ignored and every problem is reported at once") {
    val e = intercept[SluiceConfException](conf(
        "spark.master" -> "local[2]",
        "spark.sluice.commit.interval.ms" -> "x",
        "spark.sluice.input.buffer.max.bytes" -> "y"))
    assert(e.getMessage.contains("spark.sluice.commit.interval.ms"))
    assert(e.getMessage.contains("spark.sluice.input.buffer.max.bytes"))
    assert(!e.getMessage.contains("spark.master"))
  }

  test("edit distance") {
    assert(SluiceConf.editDistance("kitten", "sitting") == 3)
    assert(SluiceConf.closest("spark.sluice.comit.interval.ms", SluiceConf.entries.map(_.key)) ==
      "spark.sluice.commit.interval.ms")
  }

  test("the parsers agree with sluice/conf.json: its vectors and every unit it lists (Python checks the same file)") {
    import scala.jdk.CollectionConverters._
    val forms = SluiceConf.spec.get("forms")
    def vectors(form: String) = forms.get(form).get("vectors").elements().asScala.map { v =>
      (v.get(0).asText(), if (v.get(1).isNull) None else Some(v.get(1).asText()))
    }.toSeq
    for ((in, out) <- vectors("bytes")) assert(SluiceConf.parseBytes(in).map(_.toString) == out, in)
    for ((in, out) <- vectors("millis")) assert(SluiceConf.parseMillis(in).map(_.toString) == out, in)
    val snapshot = SluiceConf.WindowStoreSnapshotInterval
    for ((in, out) <- vectors("positive_int")) assert(snapshot.parse(in).map(_.toString) == out, in)
    for ((in, out) <- vectors("string")) assert(SluiceConf.WindowStoreName.parse(in) == out, in)
    val byteUnits = forms.get("bytes").get("units")
    for (u <- byteUnits.fieldNames().asScala) {
      assert(SluiceConf.parseBytes(s"7$u").contains(7L * byteUnits.get(u).asLong()), u)
      assert(SluiceConf.parseBytes(s"7${u.toUpperCase}").contains(7L * byteUnits.get(u).asLong()), u)
    }
    val timeUnits = forms.get("millis").get("units_in_micros")
    for (u <- timeUnits.fieldNames().asScala) {
      assert(SluiceConf.parseMillis(s"7000$u").contains(7000L * timeUnits.get(u).asLong() / 1000), u)
    }
    // and no unit that the table lacks
    for (u <- Seq("x", "kib", "w", "sec", "hours")) {
      assert(SluiceConf.parseBytes(s"7$u").isEmpty || byteUnits.has(u), u)
      assert(SluiceConf.parseMillis(s"7$u").isEmpty || timeUnits.has(u), u)
    }
  }

  test("the provider names of the record cache's delegate are the spec's") {
    assert(sluice.cache.CachingStateStoreProvider.DelegateClasses.keySet == Set("rocksdb", "hdfs", "in_memory_window"))
    assert(SluiceConf.StateStoreCacheDelegate.expected == "one of rocksdb, hdfs, in_memory_window")
  }

  test("the names only Python reads from conf.json's contract are the JVM's, and every provider loads on this minor") {
    val contract = SluiceConf.spec.get("contract")
    val classes = contract.get("classes")
    assert(classes.get("plugin").asText() == classOf[sluice.plugin.SluicePlugin].getName)
    assert(classes.get("extensions").asText() == classOf[sluice.plugin.SluiceExtensions].getName)
    assert(classes.get("connect_relation_plugin").asText() == classOf[sluice.connect.SuppressRelationPlugin].getName)
    assert(contract.get("provider_class_key").asText() == sluice.spark.SparkSessionConf.ProviderClassKey)
    assert(SluiceConf.CachingProviderClass == classOf[sluice.cache.CachingStateStoreProvider].getName)
    assert(SluiceConf.ProviderClasses("in_memory_window") ==
      classOf[sluice.windowstore.InMemoryWindowStoreProvider].getName)
    // Spark's providers keep their names on every supported minor; this runs on each.
    for (cls <- SluiceConf.ProviderClasses.values) Class.forName(cls, false, getClass.getClassLoader)
  }

  test("the operator id ranges are disjoint and above Spark's own ids") {
    val ranges = Seq(SluiceConf.SuppressIds, SluiceConf.EmitCacheIds)
    assert(ranges.forall(r => 0 < r.from && r.from < r.until))
    assert(SluiceConf.SuppressIds.until <= SluiceConf.EmitCacheIds.from)
  }
}
