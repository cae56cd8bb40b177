package sluice.input.internal

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.util.CaseInsensitiveStringMap
import org.scalatest.funsuite.AnyFunSuite

class KafkaFetchSuite extends AnyFunSuite {
  private def opts(kv: (String, String)*) = new CaseInsensitiveStringMap(kv.toMap.asJava)
  private val fetch = KafkaFetch.PartitionFetchBytesOption
  private val poll = KafkaFetch.MaxPollRecordsOption

  test("a source that sets neither gets the fetch size and enough records per poll to return it whole") {
    val o = KafkaFetch.withDefaults(opts("subscribe" -> "t"), 8L << 20, microBatch = false)
    assert(o.get(fetch) == (8L << 20).toString)
    assert(o.get(poll) == ((8L << 20) / KafkaFetch.MinRecordBytes).toString)
    assert(o.get("subscribe") == "t")
  }

  test("the source's own options are never replaced, in any letter case") {
    val o = KafkaFetch.withDefaults(opts("KAFKA.Max.Partition.Fetch.Bytes" -> "1048576"), 8L << 20, microBatch = true)
    assert(o.get(fetch) == "1048576")
    assert(o.get(poll) == (1048576L / KafkaFetch.MinRecordBytes).toString) // sized from the source's fetch
    val p = KafkaFetch.withDefaults(opts("kafka.max.poll.records" -> "7"), 8L << 20, microBatch = true)
    assert(p.get(poll) == "7" && p.get(fetch) == (8L << 20).toString)
  }

  test("records per poll never go below Kafka's own default") {
    assert(KafkaFetch.withDefaults(opts(), 4096, microBatch = false).get(
      poll) == KafkaFetch.KafkaMaxPollRecords.toString)
  }

  test("0 keeps Kafka's fetch size; the fetch never exceeds the source's input bound") {
    val o = opts("subscribe" -> "t")
    assert(KafkaFetch.withDefaults(o, 0, microBatch = false) eq o)
    val m = KafkaFetch.withDefaults(o, 0, microBatch = true)
    assert(!m.containsKey(fetch) && !m.containsKey(poll))
    assert(KafkaFetch.fetchBytes(0, 1L << 30) == 0)
    assert(KafkaFetch.fetchBytes(8L << 20, 2L << 20) == (2L << 20))
    assert(KafkaFetch.fetchBytes(8L << 30, 16L << 30) == Int.MaxValue.toLong) // the consumer's setting is an int
  }

  private val maxWait = KafkaFetch.FetchMaxWaitOption

  test("a micro-batch source gets a short broker wait for an empty fetch; real time keeps Kafka's") {
    assert(KafkaFetch.withDefaults(opts(), 8L << 20, microBatch = true).get(maxWait) ==
      KafkaFetch.MicroBatchFetchMaxWaitMs.toString)
    assert(KafkaFetch.withDefaults(opts(), 0, microBatch = true).get(
      maxWait) == KafkaFetch.MicroBatchFetchMaxWaitMs.toString)
    assert(!KafkaFetch.withDefaults(opts(), 8L << 20, microBatch = false).containsKey(maxWait))
    assert(KafkaFetch.withDefaults(opts("Kafka.Fetch.Max.Wait.Ms" -> "500"), 8L << 20, microBatch = true).get(
      maxWait) == "500")
  }
}
