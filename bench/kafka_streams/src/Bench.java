// The JVM half of bench/kafka_streams: the Kafka Streams side of the comparison, and the tools both
// sides share (topic creation, the seeded producers, the output watcher and the output reader).
// Compiled by bench/kafka_streams/run against the jars of pom.xml; one mode per invocation:
//
//   create-topic  --bootstrap B --topic T --partitions P [--log-append-time]
//   backlog       --bootstrap B --topic T --records N --keys K --zipf S --span-s S --disorder-ms D
//                 --seed X --expected FILE
//   rate          --bootstrap B --topic T --rate R --duration-s D --keys K --zipf S --disorder-ms D
//                 --seed X --expected FILE --closes FILE
//   streams       --bootstrap B --input T --output O --app-id A --threads N --state-dir DIR
//                 [--commit-interval-ms MS] [--cache-bytes N]
//   watch         --bootstrap B --topic O --count N --timeout-s T
//   collect       --bootstrap B --topic O --expected FILE --out FILE [--closes FILE]
//   diff          FILE FILE
//
// Records: key "k%07d" (key index, Zipf-ranked: index 0 is the most frequent), value a short JSON
// string, event time = the record timestamp (CreateTime). Both sides write one record per final
// result: key = the input key, value = "<window start ms>:<count>". A result row is encoded as one
// long (key index, window start in minutes from the run's origin, count), so whole topics compare
// as sorted arrays.
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.config.TopicConfig;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.serialization.*;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.common.utils.Utils;
import org.apache.kafka.streams.*;
import org.apache.kafka.streams.kstream.*;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.state.WindowStore;

public final class Bench {
    static final long WINDOW_MS = 60_000L, GRACE_MS = 10_000L;
    static final int KEY_BITS = 23, MINUTE_BITS = 21, COUNT_BITS = 20;

    public static void main(String[] argv) throws Exception {
        String mode = argv[0];
        Map<String, String> a = mode.equals("diff") ? Map.of() : args(Arrays.copyOfRange(argv, 1, argv.length));
        switch (mode) {
            case "create-topic" -> createTopic(a);
            case "backlog" -> backlog(a);
            case "rate" -> rate(a);
            case "streams" -> streams(a);
            case "watch" -> System.exit(watch(a));
            case "collect" -> collect(a);
            case "diff" -> System.out.println("{\"differing\": " + differing(readRows(Path.of(argv[1])).rows,
                    readRows(Path.of(argv[2])).rows) + "}");
            default -> throw new IllegalArgumentException("unknown mode " + mode);
        }
    }

    static Map<String, String> args(String[] argv) {
        Map<String, String> m = new HashMap<>();
        for (int i = 0; i < argv.length; i++) {
            if (!argv[i].startsWith("--")) throw new IllegalArgumentException("expected --key, got " + argv[i]);
            String k = argv[i].substring(2);
            if (i + 1 < argv.length && !argv[i + 1].startsWith("--")) m.put(k, argv[++i]);
            else m.put(k, "true");
        }
        return m;
    }

    static String req(Map<String, String> a, String k) {
        String v = a.get(k);
        if (v == null) throw new IllegalArgumentException("missing --" + k);
        return v;
    }

    // ---------------------------------------------------------------- topics

    static void createTopic(Map<String, String> a) throws Exception {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, req(a, "bootstrap"));
        try (Admin admin = Admin.create(p)) {
            NewTopic t = new NewTopic(req(a, "topic"), Integer.parseInt(req(a, "partitions")), (short) 1);
            // The backlog's event times lie in the past (a fixed start, for the same contents from the
            // same seed): without this the broker's time retention (7 days) deletes them at once.
            Map<String, String> configs = new HashMap<>(Map.of(TopicConfig.RETENTION_MS_CONFIG, "-1"));
            if (a.containsKey("log-append-time"))
                configs.put(TopicConfig.MESSAGE_TIMESTAMP_TYPE_CONFIG, "LogAppendTime");
            t.configs(configs);
            admin.createTopics(List.of(t)).all().get();
        }
    }

    // ---------------------------------------------------------------- producers

    /** Key indexes drawn from a Zipf(s) distribution over `keys` keys (inverse CDF by binary search). */
    static final class Zipf {
        final double[] cdf;
        final SplittableRandom rnd;

        Zipf(int keys, double s, long seed) {
            cdf = new double[keys];
            double sum = 0;
            for (int i = 0; i < keys; i++) { sum += 1.0 / Math.pow(i + 1, s); cdf[i] = sum; }
            for (int i = 0; i < keys; i++) cdf[i] /= sum;
            rnd = new SplittableRandom(seed);
        }

        int next() {
            int i = Arrays.binarySearch(cdf, rnd.nextDouble());
            return Math.min(i >= 0 ? i : -i - 1, cdf.length - 1);
        }
    }

    static String key(int idx) { return String.format("k%07d", idx); }

    static KafkaProducer<String, String> producer(String bootstrap) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, String.valueOf(256 << 10));
        p.put(ProducerConfig.BUFFER_MEMORY_CONFIG, String.valueOf(64 << 20));
        p.put(ProducerConfig.ACKS_CONFIG, "1");
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static int partitions(String bootstrap, String topic) throws Exception {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(p)) {
            return admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size();
        }
    }

    /** The partition Kafka's default partitioner gives a keyed record (murmur2 of the key bytes). */
    static int partitionOf(String key, int partitions) {
        return Utils.toPositive(Utils.murmur2(key.getBytes(StandardCharsets.UTF_8))) % partitions;
    }

    /** Accumulates (key, window) pairs and writes the expected final results. */
    static final class Expected {
        final long originMinute;
        long[] pairs = new long[1 << 16];
        int n;

        Expected(long originMinute) { this.originMinute = originMinute; }

        void add(int keyIdx, long ts) {
            if (n == pairs.length) pairs = Arrays.copyOf(pairs, n * 2);
            pairs[n++] = encode(keyIdx, Math.floorDiv(ts, WINDOW_MS) - originMinute, 0);
        }

        /** Sorted rows (key, window, count) of every window: the final results with nothing dropped. */
        long[] rows() {
            long[] p = Arrays.copyOf(pairs, n);
            Arrays.sort(p);
            long[] out = new long[n];
            int m = 0;
            for (int i = 0; i < n; ) {
                int j = i;
                while (j < n && p[j] == p[i]) j++;
                out[m++] = p[i] | checkCount(j - i);
                i = j;
            }
            return Arrays.copyOf(out, m);
        }
    }

    static long encode(long keyIdx, long minute, long count) {
        if (keyIdx < 0 || keyIdx >= 1L << KEY_BITS || minute < 0 || minute >= 1L << MINUTE_BITS || count < 0
                || count >= 1L << COUNT_BITS)
            throw new IllegalStateException("row out of encodable range: key " + keyIdx + " minute " + minute
                    + " count " + count);
        return keyIdx << (MINUTE_BITS + COUNT_BITS) | minute << COUNT_BITS | count;
    }

    static long checkCount(long c) { return encode(0, 0, c); }

    static void writeRows(Path f, long originMinute, long[] rows) throws IOException {
        try (DataOutputStream out = new DataOutputStream(new BufferedOutputStream(Files.newOutputStream(f), 1 << 20))) {
            out.writeLong(originMinute);
            out.writeInt(rows.length);
            for (long r : rows) out.writeLong(r);
        }
    }

    record Rows(long originMinute, long[] rows) {}

    static Rows readRows(Path f) throws IOException {
        try (DataInputStream in = new DataInputStream(new BufferedInputStream(Files.newInputStream(f), 1 << 20))) {
            long origin = in.readLong();
            long[] rows = new long[in.readInt()];
            for (int i = 0; i < rows.length; i++) rows[i] = in.readLong();
            return new Rows(origin, rows);
        }
    }

    static String value(int keyIdx, long seq) {
        return "{\"user\":\"" + key(keyIdx) + "\",\"seq\":" + seq + ",\"amount\":" + (seq * 7919 % 1000) + "}";
    }

    /** One record per partition far past the last event time, so that every real window closes on both
     * sides: Kafka Streams closes windows per task (partition) on that partition's stream time, Spark
     * on one global watermark; the flush windows themselves never close and are not results. */
    static void flush(KafkaProducer<String, String> prod, String topic, int partitions, long ts) {
        for (int p = 0; p < partitions; p++)
            prod.send(new ProducerRecord<>(topic, p, ts, "~flush-" + p, "flush"));
    }

    static void backlog(Map<String, String> a) throws Exception {
        String bootstrap = req(a, "bootstrap"), topic = req(a, "topic");
        long records = Long.parseLong(req(a, "records"));
        int keys = Integer.parseInt(req(a, "keys"));
        long spanMs = Long.parseLong(req(a, "span-s")) * 1000, disorderMs = Long.parseLong(req(a, "disorder-ms"));
        checkDisorder(disorderMs);
        long seed = Long.parseLong(req(a, "seed"));
        // A fixed, minute-aligned start: the same seed gives the same topic contents.
        long base = 1_767_225_600_000L; // 2026-01-01T00:00:00Z
        Zipf zipf = new Zipf(keys, Double.parseDouble(req(a, "zipf")), seed);
        SplittableRandom jitter = new SplittableRandom(seed ^ 0x5DEECE66DL);
        int parts = partitions(bootstrap, topic);
        Expected exp = new Expected(Math.floorDiv(base, WINDOW_MS) - 1);
        long bytes = 0, maxTs = Long.MIN_VALUE, maxBehind = 0, minTs = Long.MAX_VALUE;
        long[] perPartition = new long[parts];
        long t0 = System.nanoTime();
        try (KafkaProducer<String, String> prod = producer(bootstrap)) {
            for (long i = 0; i < records; i++) {
                int k = zipf.next();
                // Event times advance evenly over the span; each record is up to disorderMs behind its
                // place, so no record is more than disorderMs behind any record produced before it.
                long ts = base + (long) ((double) i * spanMs / records) - jitter.nextLong(disorderMs + 1);
                String key = key(k), v = value(k, i);
                perPartition[partitionOf(key, parts)]++;
                prod.send(new ProducerRecord<>(topic, null, ts, key, v));
                exp.add(k, ts);
                bytes += key.length() + v.length();
                if (i > 0) maxBehind = Math.max(maxBehind, maxTs - ts);
                maxTs = Math.max(maxTs, ts);
                minTs = Math.min(minTs, ts);
            }
            long flushTs = Math.floorDiv(maxTs, WINDOW_MS) * WINDOW_MS + 3_600_000L;
            flush(prod, topic, parts, flushTs);
            prod.flush();
        }
        double secs = (System.nanoTime() - t0) / 1e9;
        long[] rows = exp.rows();
        writeRows(Path.of(req(a, "expected")), exp.originMinute, rows);
        System.out.println("{\"records\": " + records + ", \"keys\": " + keys + ", \"bytes\": " + bytes
                + ", \"expected_rows\": " + rows.length + ", \"first_ts\": " + minTs + ", \"last_ts\": " + maxTs
                + ", \"max_behind_ms\": " + maxBehind + ", \"per_partition\": " + Arrays.toString(perPartition)
                + ", \"produce_s\": " + String.format("%.2f", secs) + "}");
    }

    static void checkDisorder(long disorderMs) {
        // A record is dropped by Kafka Streams when its window ends at or before stream time - grace and
        // by Spark when its window ends at or before the watermark (max event time seen - 10 s); a
        // record at most disorderMs behind every record before it is in a window that ends after both
        // as long as disorderMs < grace, with room left for the partitions' offset ranges in a Spark
        // micro-batch not ending at the same place in production order.
        if (disorderMs < 0 || disorderMs > GRACE_MS / 2)
            throw new IllegalArgumentException("--disorder-ms must be in [0, " + GRACE_MS / 2 + "]");
    }

    static void rate(Map<String, String> a) throws Exception {
        String bootstrap = req(a, "bootstrap"), topic = req(a, "topic");
        double rate = Double.parseDouble(req(a, "rate"));
        long durationMs = Long.parseLong(req(a, "duration-s")) * 1000;
        int keys = Integer.parseInt(req(a, "keys"));
        long disorderMs = Long.parseLong(req(a, "disorder-ms"));
        checkDisorder(disorderMs);
        long seed = Long.parseLong(req(a, "seed"));
        Zipf zipf = new Zipf(keys, Double.parseDouble(req(a, "zipf")), seed);
        SplittableRandom jitter = new SplittableRandom(seed ^ 0x5DEECE66DL);
        int parts = partitions(bootstrap, topic);
        long start = System.currentTimeMillis();
        Expected exp = new Expected(Math.floorDiv(start, WINDOW_MS) - 1);
        // Per partition: the largest timestamp sent, and per window start (minutes) the wall-clock time
        // the first record closing it on that partition (timestamp >= window end + grace) was sent.
        long[] maxTs = new long[parts];
        Arrays.fill(maxTs, Long.MIN_VALUE);
        long[] closedUpTo = new long[parts]; // next window start (minute) not yet closed, per partition
        Arrays.fill(closedUpTo, Long.MIN_VALUE);
        // "p windowStart sentMs" per closing record; its broker ack time is added by the send callback.
        List<String> closes = Collections.synchronizedList(new ArrayList<>());
        long sent = 0, lateSends = 0;
        long startNs = System.nanoTime();
        try (KafkaProducer<String, String> prod = producer(bootstrap)) {
            while (true) {
                long dueNs = startNs + (long) (sent * 1e9 / rate);
                long now = System.nanoTime();
                if (dueNs - startNs >= durationMs * 1_000_000L) break;
                if (dueNs > now) {
                    long waitNs = dueNs - now;
                    if (waitNs > 200_000) Thread.sleep(waitNs / 1_000_000, (int) (waitNs % 1_000_000));
                    continue;
                }
                if (now - dueNs > 100_000_000L) lateSends++;
                int k = zipf.next();
                long wall = System.currentTimeMillis();
                long ts = wall - jitter.nextLong(disorderMs + 1);
                String key = key(k), v = value(k, sent);
                int p = partitionOf(key, parts);
                exp.add(k, ts);
                sent++;
                List<String> closing = new ArrayList<>();
                if (ts > maxTs[p]) {
                    maxTs[p] = ts;
                    long closable = Math.floorDiv(ts - GRACE_MS - WINDOW_MS, WINDOW_MS); // last closed window
                    if (closedUpTo[p] == Long.MIN_VALUE) closedUpTo[p] = closable + 1;
                    for (; closedUpTo[p] <= closable; closedUpTo[p]++)
                        closing.add(p + " " + closedUpTo[p] * WINDOW_MS + " " + wall);
                }
                if (closing.isEmpty()) prod.send(new ProducerRecord<>(topic, p, ts, key, v));
                else prod.send(new ProducerRecord<>(topic, p, ts, key, v), (md, e) -> {
                    long acked = System.currentTimeMillis();
                    for (String c : closing) closes.add(c + " " + acked);
                });
            }
            long last = Arrays.stream(maxTs).max().getAsLong();
            flush(prod, topic, parts, Math.floorDiv(last, WINDOW_MS) * WINDOW_MS + 3_600_000L);
            prod.flush();
        }
        long[] rows = exp.rows();
        writeRows(Path.of(req(a, "expected")), exp.originMinute, rows);
        Files.write(Path.of(req(a, "closes")), closes);
        double secs = (System.nanoTime() - startNs) / 1e9;
        System.out.println("{\"records\": " + sent + ", \"expected_rows\": " + rows.length + ", \"produce_s\": "
                + String.format("%.2f", secs) + ", \"achieved_rate\": " + String.format("%.0f", sent / secs)
                + ", \"sends_over_100ms_late\": " + lateSends + "}");
    }

    // ---------------------------------------------------------------- Kafka Streams side

    static void streams(Map<String, String> a) throws Exception {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, req(a, "app-id"));
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, req(a, "bootstrap"));
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, req(a, "threads"));
        p.put(StreamsConfig.STATE_DIR_CONFIG, req(a, "state-dir"));
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        // The record cache in front of the window store forwards updates to suppress only when it is
        // flushed (every commit) or evicts: with the default 30 s commit interval a window's final
        // result can wait up to 30 s after the record that closed it. The bench sets both.
        if (a.containsKey("commit-interval-ms"))
            p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, a.get("commit-interval-ms"));
        if (a.containsKey("cache-bytes"))
            p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, a.get("cache-bytes"));

        StreamsBuilder b = new StreamsBuilder();
        b.stream(req(a, "input"), Consumed.with(Serdes.String(), Serdes.String()))
                .groupByKey()
                .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(WINDOW_MS), Duration.ofMillis(GRACE_MS)))
                .count(Materialized.<String, Long>as(Stores.inMemoryWindowStore("counts",
                                Duration.ofMillis(WINDOW_MS + GRACE_MS), Duration.ofMillis(WINDOW_MS), false))
                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
                .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
                .toStream()
                .map((wk, c) -> KeyValue.pair(wk.key(), wk.window().start() + ":" + c))
                .to(req(a, "output"), Produced.with(Serdes.String(), Serdes.String()));
        Topology topology = b.build();

        KafkaStreams ks = new KafkaStreams(topology, p);
        CountDownLatch running = new CountDownLatch(1);
        ks.setStateListener((n, o) -> { if (n == KafkaStreams.State.RUNNING) running.countDown(); });
        ks.setUncaughtExceptionHandler(e -> {
            e.printStackTrace();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_APPLICATION;
        });
        StreamsConfig cfg = new StreamsConfig(p);
        System.out.println("{\"event\": \"config\", \"streams\": {"
                + "\"num.stream.threads\": " + cfg.getInt(StreamsConfig.NUM_STREAM_THREADS_CONFIG)
                + ", \"processing.guarantee\": \"" + cfg.getString(StreamsConfig.PROCESSING_GUARANTEE_CONFIG) + "\""
                + ", \"commit.interval.ms\": " + cfg.getLong(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG)
                + ", \"statestore.cache.max.bytes\": " + cfg.getLong(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG)
                + ", \"window store\": \"Stores.inMemoryWindowStore(retention 70 s), changelog on\""
                + ", \"suppress\": \"untilWindowCloses(unbounded()), changelog on\"}}");
        long startMs = System.currentTimeMillis();
        ks.start();
        System.out.println("{\"event\": \"started\", \"start_ms\": " + startMs + "}");
        if (running.await(120, TimeUnit.SECONDS))
            System.out.println("{\"event\": \"running\", \"running_ms\": " + System.currentTimeMillis() + "}");
        System.out.flush();
        // Runs until told to stop on stdin (or stdin closes).
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (String line; (line = in.readLine()) != null; ) if (line.trim().equals("stop")) break;
        double dropped = 0;
        for (Map.Entry<MetricName, ? extends Metric> m : ks.metrics().entrySet())
            if (m.getKey().name().equals("dropped-records-total") && m.getKey().group().equals("stream-task-metrics"))
                dropped += ((Number) m.getValue().metricValue()).doubleValue();
        ks.close(Duration.ofSeconds(60));
        System.out.println("{\"event\": \"stopped\", \"dropped_records\": " + (long) dropped + ", \"vm_hwm_kb\": "
                + vmHwmKb() + ", \"state\": \"" + ks.state() + "\"}");
    }

    static long vmHwmKb() throws IOException {
        for (String l : Files.readAllLines(Path.of("/proc/self/status")))
            if (l.startsWith("VmHWM:")) return Long.parseLong(l.replaceAll("[^0-9]", ""));
        return -1;
    }

    // ---------------------------------------------------------------- output side

    static KafkaConsumer<String, String> consumer(String bootstrap) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_uncommitted");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10000");
        return new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
    }

    static List<TopicPartition> topicPartitions(KafkaConsumer<?, ?> c, String topic) {
        List<TopicPartition> tps = new ArrayList<>();
        for (PartitionInfo pi : c.partitionsFor(topic)) tps.add(new TopicPartition(topic, pi.partition()));
        return tps;
    }

    /** Polls the output topic's end offsets until they add up to `count` records; prints the time. */
    static int watch(Map<String, String> a) throws Exception {
        long count = Long.parseLong(req(a, "count"));
        long deadline = System.currentTimeMillis() + Long.parseLong(req(a, "timeout-s")) * 1000;
        try (KafkaConsumer<String, String> c = consumer(req(a, "bootstrap"))) {
            List<TopicPartition> tps = topicPartitions(c, req(a, "topic"));
            long n = 0;
            while (System.currentTimeMillis() < deadline) {
                n = c.endOffsets(tps).values().stream().mapToLong(Long::longValue).sum();
                if (n >= count) {
                    System.out.println("{\"reached\": " + n + ", \"at_ms\": " + System.currentTimeMillis() + "}");
                    return 0;
                }
                Thread.sleep(100);
            }
            System.out.println("{\"timeout\": true, \"records\": " + n + "}");
            return 2;
        }
    }

    /** Reads a whole output topic: its result rows (sorted, written to --out), the first and last broker
     * append times, how many rows differ from the expected results, and with --closes the latency of
     * each final result from the production of the record that closed its window (on its key's input
     * partition) to the result's broker append time. */
    static void collect(Map<String, String> a) throws Exception {
        Rows expected = readRows(Path.of(req(a, "expected")));
        Map<Long, long[]>[] closes = null;
        int inputPartitions = Integer.parseInt(a.getOrDefault("input-partitions", "2"));
        if (a.containsKey("closes")) {
            @SuppressWarnings("unchecked") Map<Long, long[]>[] c = new Map[inputPartitions];
            for (int i = 0; i < c.length; i++) c[i] = new HashMap<>();
            for (String l : Files.readAllLines(Path.of(a.get("closes")))) {
                String[] f = l.split(" ");
                c[Integer.parseInt(f[0])].put(Long.parseLong(f[1]), new long[]{Long.parseLong(f[2]), Long.parseLong(f[3])});
            }
            closes = c;
        }
        long[] rows = new long[1 << 16];
        int n = 0, flushRows = 0;
        long firstAppend = Long.MAX_VALUE, lastAppend = Long.MIN_VALUE;
        long[] lat = new long[1 << 16], latAck = new long[1 << 16];
        int nl = 0, unclosed = 0;
        try (KafkaConsumer<String, String> c = consumer(req(a, "bootstrap"))) {
            List<TopicPartition> tps = topicPartitions(c, req(a, "topic"));
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps);
            while (tps.stream().anyMatch(tp -> c.position(tp) < end.get(tp))) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofSeconds(1))) {
                    if (r.timestampType() != TimestampType.LOG_APPEND_TIME)
                        throw new IllegalStateException("output topic must use LogAppendTime");
                    firstAppend = Math.min(firstAppend, r.timestamp());
                    lastAppend = Math.max(lastAppend, r.timestamp());
                    if (r.key().startsWith("~flush")) { flushRows++; continue; }
                    String v = r.value();
                    int colon = v.indexOf(':');
                    long ws = Long.parseLong(v.substring(0, colon)), count = Long.parseLong(v.substring(colon + 1));
                    if (n == rows.length) rows = Arrays.copyOf(rows, n * 2);
                    rows[n++] = encode(Long.parseLong(r.key().substring(1)), Math.floorDiv(ws, WINDOW_MS)
                            - expected.originMinute, count);
                    if (closes != null) {
                        long[] closed = closes[partitionOf(r.key(), inputPartitions)].get(ws);
                        if (closed == null) { unclosed++; continue; } // closed by the flush record
                        if (nl == lat.length) { lat = Arrays.copyOf(lat, nl * 2); latAck = Arrays.copyOf(latAck, nl * 2); }
                        latAck[nl] = r.timestamp() - closed[1];
                        lat[nl++] = r.timestamp() - closed[0];
                    }
                }
            }
        }
        long[] sorted = Arrays.copyOf(rows, n);
        Arrays.sort(sorted);
        writeRows(Path.of(req(a, "out")), expected.originMinute, sorted);
        StringBuilder s = new StringBuilder("{\"rows\": " + n + ", \"flush_rows\": " + flushRows
                + ", \"first_append_ms\": " + firstAppend + ", \"last_append_ms\": " + lastAppend
                + ", \"expected_rows\": " + expected.rows.length
                + ", \"differing_from_expected\": " + differing(sorted, expected.rows));
        if (closes != null) {
            long[] l = Arrays.copyOf(lat, nl), la = Arrays.copyOf(latAck, nl);
            Arrays.sort(l);
            Arrays.sort(la);
            s.append(", \"latency_rows\": ").append(nl).append(", \"rows_closed_by_flush\": ").append(unclosed);
            if (nl > 0)
                s.append(", \"latency_p50_ms\": ").append(pct(l, 0.50)).append(", \"latency_p99_ms\": ")
                        .append(pct(l, 0.99)).append(", \"latency_max_ms\": ").append(l[nl - 1])
                        .append(", \"latency_min_ms\": ").append(l[0])
                        .append(", \"from_ack_p50_ms\": ").append(pct(la, 0.50))
                        .append(", \"from_ack_p99_ms\": ").append(pct(la, 0.99));
        }
        System.out.println(s.append("}"));
    }

    static long pct(long[] sorted, double q) {
        return sorted[(int) Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)];
    }

    /** Rows in one sorted multiset and not the other, both ways. */
    static long differing(long[] x, long[] y) {
        int i = 0, j = 0;
        long d = 0;
        while (i < x.length && j < y.length) {
            if (x[i] == y[j]) { i++; j++; }
            else if (x[i] < y[j]) { d++; i++; }
            else { d++; j++; }
        }
        return d + (x.length - i) + (y.length - j);
    }
}
