// The Kafka Streams side of bench/peers: one query per process, as a Kafka Streams user writes it
// (DSL; windowed aggregations with in-memory window/session stores and suppress(untilWindowCloses)
// for final results; JSON values parsed with Jackson data binding). Prints JSON lines (config,
// started, running, stopped) and stops when "stop" comes on stdin.
//
//   PeersStreams --query Q --bootstrap B --input T --output O --app-id A --state-dir DIR --threads 2
//                --lateness-ms L [--commit-interval-ms MS] [--cache-bytes N]
//
// Event time is the record timestamp (Kafka Streams' default extractor), which the generator sets to
// the event's dateTime. Allowed lateness = grace of every window.
import java.io.*;
import java.nio.ByteBuffer;
import java.nio.file.*;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.serialization.*;
import org.apache.kafka.streams.*;
import org.apache.kafka.streams.kstream.*;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.Stores;

public final class PeersStreams {
    static Serde<Nexmark.Event> eventSerde() {
        return Serdes.serdeFrom((t, e) -> { throw new UnsupportedOperationException(); },
                (t, bytes) -> bytes == null ? null : Nexmark.parse(bytes));
    }

    /** A fixed-width serde of long[] (q7's candidate bids: price, dateTime, auction, bidder). */
    static Serde<long[]> longsSerde() {
        return Serdes.serdeFrom((t, v) -> {
            ByteBuffer b = ByteBuffer.allocate(8 * v.length);
            for (long x : v) b.putLong(x);
            return b.array();
        }, (t, bytes) -> {
            if (bytes == null) return null;
            ByteBuffer b = ByteBuffer.wrap(bytes);
            long[] v = new long[bytes.length / 8];
            for (int i = 0; i < v.length; i++) v[i] = b.getLong();
            return v;
        });
    }

    static final byte[] NONE = new byte[0];

    /** Re-keys windowed results by their window start and stamps them with the window's last
     * millisecond, for a second windowed stage that gathers one window's results. */
    static <V> KStream<Long, V> byWindow(KStream<Windowed<Long>, V> s, long sizeMs) {
        return s.process(() -> new Processor<Windowed<Long>, V, Long, V>() {
            ProcessorContext<Long, V> ctx;

            @Override
            public void init(ProcessorContext<Long, V> context) { ctx = context; }

            @Override
            public void process(Record<Windowed<Long>, V> r) {
                long ws = r.key().window().start();
                ctx.forward(new Record<>(ws, r.value(), ws + sizeMs - 1));
            }
        });
    }

    static Topology topology(String q, String in, String out, long lateMs) {
        StreamsBuilder b = new StreamsBuilder();
        Duration late = Duration.ofMillis(lateMs);
        if (q.equals("count")) {
            b.stream(in, Consumed.with(Serdes.String(), Serdes.String()))
                    .groupByKey()
                    .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(Queries.COUNT_WINDOW_MS), late))
                    .count(Materialized.<String, Long>as(Stores.inMemoryWindowStore("counts",
                                    Duration.ofMillis(Queries.COUNT_WINDOW_MS + lateMs), Duration.ofMillis(Queries.COUNT_WINDOW_MS), false))
                            .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
                    .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
                    .toStream()
                    .map((wk, c) -> KeyValue.pair((String) null, wk.key() + "," + wk.window().start() + "," + c))
                    .to(out, Produced.with(Serdes.String(), Serdes.String()));
            return b.build();
        }
        KStream<byte[], Nexmark.Event> ev = b.stream(in, Consumed.with(Serdes.ByteArray(), eventSerde()));
        switch (q) {
            case "q5" -> {
                Duration size = Duration.ofMillis(Queries.Q5_SIZE_MS), slide = Duration.ofMillis(Queries.Q5_SLIDE_MS);
                KStream<Windowed<Long>, Long> counts = ev.filter((k, e) -> e.bid != null)
                        .map((k, e) -> KeyValue.pair(e.bid.auction, NONE))
                        .groupByKey(Grouped.with("q5-by-auction", Serdes.Long(), Serdes.ByteArray()))
                        .windowedBy(TimeWindows.ofSizeAndGrace(size, late).advanceBy(slide))
                        .count(Materialized.<Long, Long>as(Stores.inMemoryWindowStore("q5-counts",
                                        size.plus(late), size, false))
                                .withKeySerde(Serdes.Long()).withValueSerde(Serdes.Long()))
                        .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()).withName("q5-final-counts"))
                        .toStream();
                // Second stage: per window start, the auctions with the most bids ("max;auction,auction...").
                byWindow(counts.mapValues((wk, c) -> wk.key() + ":" + c), Queries.Q5_SIZE_MS)
                        .groupByKey(Grouped.with("q5-by-window", Serdes.Long(), Serdes.String()))
                        .windowedBy(TimeWindows.ofSizeAndGrace(slide, late))
                        .aggregate(() -> "0;", (ws, v, agg) -> {
                            int colon = v.indexOf(':');
                            long c = Long.parseLong(v.substring(colon + 1)), max = Long.parseLong(agg.substring(0, agg.indexOf(';')));
                            String auction = v.substring(0, colon);
                            if (c > max) return c + ";" + auction;
                            if (c == max) return agg + "," + auction;
                            return agg;
                        }, Materialized.<Long, String>as(Stores.inMemoryWindowStore("q5-max", slide.plus(late), slide, false))
                                .withKeySerde(Serdes.Long()).withValueSerde(Serdes.String()))
                        .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()).withName("q5-final-max"))
                        .toStream()
                        .flatMap((wk, agg) -> {
                            List<KeyValue<String, String>> rows = new ArrayList<>();
                            String max = agg.substring(0, agg.indexOf(';'));
                            for (String auction : agg.substring(agg.indexOf(';') + 1).split(","))
                                rows.add(KeyValue.pair(null, wk.key() + "," + auction + "," + max));
                            return rows;
                        })
                        .to(out, Produced.with(Serdes.String(), Serdes.String()));
            }
            case "q7" -> {
                Duration size = Duration.ofMillis(Queries.Q7_SIZE_MS);
                Reducer<long[]> best = (x, y) -> Queries.q7Better(y, x) ? y : x;
                // Two phases, as Spark's partial aggregation does by itself: the best bid per bucket of
                // auctions and window, then the best of those per window.
                KStream<Windowed<Long>, long[]> partial = ev.filter((k, e) -> e.bid != null)
                        .map((k, e) -> KeyValue.pair(e.bid.auction & (Queries.Q7_BUCKETS - 1),
                                new long[]{e.bid.price, e.bid.dateTime, e.bid.auction, e.bid.bidder}))
                        .groupByKey(Grouped.with("q7-by-bucket", Serdes.Long(), longsSerde()))
                        .windowedBy(TimeWindows.ofSizeAndGrace(size, late))
                        .reduce(best, Materialized.<Long, long[]>as(Stores.inMemoryWindowStore("q7-partial",
                                        size.plus(late), size, false))
                                .withKeySerde(Serdes.Long()).withValueSerde(longsSerde()))
                        .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()).withName("q7-final-partial"))
                        .toStream();
                byWindow(partial, Queries.Q7_SIZE_MS)
                        .groupByKey(Grouped.with("q7-by-window", Serdes.Long(), longsSerde()))
                        .windowedBy(TimeWindows.ofSizeAndGrace(size, late))
                        .reduce(best, Materialized.<Long, long[]>as(Stores.inMemoryWindowStore("q7-best",
                                        size.plus(late), size, false))
                                .withKeySerde(Serdes.Long()).withValueSerde(longsSerde()))
                        .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()).withName("q7-final-best"))
                        .toStream()
                        .map((wk, v) -> KeyValue.pair((String) null,
                                wk.window().start() + "," + v[0] + "," + v[1] + "," + v[2] + "," + v[3]))
                        .to(out, Produced.with(Serdes.String(), Serdes.String()));
            }
            case "q8" -> {
                Duration size = Duration.ofMillis(Queries.Q8_SIZE_MS);
                // Per person id and window: "<has auction><has person><name>", from both streams (cogroup).
                KGroupedStream<Long, String> persons = ev.filter((k, e) -> e.person != null)
                        .map((k, e) -> KeyValue.pair(e.person.id, e.person.name))
                        .groupByKey(Grouped.with("q8-persons", Serdes.Long(), Serdes.String()));
                KGroupedStream<Long, String> sellers = ev.filter((k, e) -> e.auction != null)
                        .map((k, e) -> KeyValue.pair(e.auction.seller, ""))
                        .groupByKey(Grouped.with("q8-sellers", Serdes.Long(), Serdes.String()));
                persons.<String>cogroup((id, name, agg) -> agg.charAt(0) + "1" + name)
                        .cogroup(sellers, (id, none, agg) -> "1" + agg.substring(1))
                        .windowedBy(TimeWindows.ofSizeAndGrace(size, late))
                        .aggregate(() -> "00", Materialized.<Long, String>as(Stores.inMemoryWindowStore("q8-joined",
                                        size.plus(late), size, false))
                                .withKeySerde(Serdes.Long()).withValueSerde(Serdes.String()))
                        .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()).withName("q8-final"))
                        .toStream()
                        .filter((wk, agg) -> agg.startsWith("11"))
                        .map((wk, agg) -> KeyValue.pair((String) null, wk.window().start() + "," + wk.key() + "," + agg.substring(2)))
                        .to(out, Produced.with(Serdes.String(), Serdes.String()));
            }
            case "q11" -> {
                Duration gap = Duration.ofMillis(Queries.Q11_GAP_MS);
                ev.filter((k, e) -> e.bid != null)
                        .map((k, e) -> KeyValue.pair(e.bid.bidder, NONE))
                        .groupByKey(Grouped.with("q11-by-bidder", Serdes.Long(), Serdes.ByteArray()))
                        .windowedBy(SessionWindows.ofInactivityGapAndGrace(gap, late))
                        .count(Materialized.<Long, Long>as(Stores.inMemorySessionStore("q11-sessions", gap.plus(late)))
                                .withKeySerde(Serdes.Long()).withValueSerde(Serdes.Long()))
                        .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()).withName("q11-final"))
                        .toStream()
                        .filter((wk, c) -> c != null)
                        // Kafka Streams' session end is the last bid; the canonical row has last bid + gap.
                        .map((wk, c) -> KeyValue.pair((String) null, wk.key() + "," + wk.window().start() + ","
                                + (wk.window().end() + Queries.Q11_GAP_MS) + "," + c))
                        .to(out, Produced.with(Serdes.String(), Serdes.String()));
            }
            default -> throw new IllegalArgumentException("unknown query " + q);
        }
        return b.build();
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = KafkaIo.args(argv);
        String q = KafkaIo.req(a, "query");
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, KafkaIo.req(a, "app-id"));
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, KafkaIo.req(a, "bootstrap"));
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, KafkaIo.req(a, "threads"));
        p.put(StreamsConfig.STATE_DIR_CONFIG, KafkaIo.req(a, "state-dir"));
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        // See README.md (Kafka Streams' commit interval): the record cache forwards to suppress only on commit or
        // eviction, so the default 30 s commit interval holds the last results back up to 30 s.
        if (a.containsKey("commit-interval-ms")) p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, a.get("commit-interval-ms"));
        if (a.containsKey("cache-bytes")) p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, a.get("cache-bytes"));
        Topology topology = topology(q, KafkaIo.req(a, "input"), KafkaIo.req(a, "output"), Long.parseLong(KafkaIo.req(a, "lateness-ms")));

        KafkaStreams ks = new KafkaStreams(topology, p);
        CountDownLatch running = new CountDownLatch(1);
        ks.setStateListener((n, o) -> { if (n == KafkaStreams.State.RUNNING) running.countDown(); });
        ks.setUncaughtExceptionHandler(e -> {
            e.printStackTrace();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_APPLICATION;
        });
        StreamsConfig cfg = new StreamsConfig(p);
        System.out.println("{\"event\": \"config\", \"streams\": {\"query\": \"" + q + "\""
                + ", \"num.stream.threads\": " + cfg.getInt(StreamsConfig.NUM_STREAM_THREADS_CONFIG)
                + ", \"processing.guarantee\": \"" + cfg.getString(StreamsConfig.PROCESSING_GUARANTEE_CONFIG) + "\""
                + ", \"commit.interval.ms\": " + cfg.getLong(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG)
                + ", \"statestore.cache.max.bytes\": " + cfg.getLong(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG)
                + ", \"grace ms\": " + a.get("lateness-ms")
                + ", \"stores\": \"in-memory window/session stores, changelogs on; suppress buffers with changelogs\""
                + ", \"sub-topologies\": " + topology.describe().subtopologies().size() + "}}");
        long startMs = System.currentTimeMillis();
        ks.start();
        System.out.println("{\"event\": \"started\", \"start_ms\": " + startMs + "}");
        if (running.await(120, TimeUnit.SECONDS))
            System.out.println("{\"event\": \"running\", \"running_ms\": " + System.currentTimeMillis() + "}");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (String line; (line = in.readLine()) != null; ) if (line.trim().equals("stop")) break;
        double dropped = 0;
        for (Map.Entry<MetricName, ? extends Metric> m : ks.metrics().entrySet())
            if (m.getKey().name().equals("dropped-records-total") && m.getKey().group().equals("stream-task-metrics"))
                dropped += ((Number) m.getValue().metricValue()).doubleValue();
        ks.close(Duration.ofSeconds(60));
        System.out.println("{\"event\": \"stopped\", \"dropped_records\": " + (long) dropped + ", \"vm_hwm_kb\": "
                + KafkaIo.vmHwmKb() + ", \"state\": \"" + ks.state() + "\"}");
    }
}
