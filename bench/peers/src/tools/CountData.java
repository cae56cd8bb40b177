// The windowed count's data (the `count` query of bench/peers; formerly bench/kafka_streams' own
// generator, same seed, same records): keyed string records, key "k%07d" (key index, Zipf-ranked:
// index 0 is the most frequent), value a short JSON string no side parses, event time = the record
// timestamp. Two modes (tools of Peers):
//
//   backlog --bootstrap B --topic T --records N --keys K --zipf S --span-s S --disorder-ms D --seed X
//           --expected FILE
//           N records with event times spread evenly over S seconds from 2026-01-01, each up to D ms
//           behind its place; then one flush record per partition 1 h past the last event time
//   rate    --bootstrap B --topic T --rate R --duration-s S --keys K --zipf S --disorder-ms D --seed X
//           --expected FILE --closes FILE [--grace-ms G]
//           R records/s for S s, event time = send time minus up to D ms; then the flush records.
//           FILE of --closes: per input partition and window, when the record that closed the window
//           there was sent and acknowledged (the latency breakdown of collect --closes)
//
// --expected gets the canonical rows (key,windowStartMs,count; sorted) of every real window: the final
// results of the 1-minute tumbling count when nothing is dropped.
import java.io.IOException;
import java.nio.file.*;
import java.util.*;

import org.apache.kafka.clients.producer.*;

final class CountData {
    static final long WINDOW_MS = Queries.COUNT_WINDOW_MS;
    static final int KEY_BITS = 23, MINUTE_BITS = 21, COUNT_BITS = 20;
    /** 2026-01-01T00:00:00Z, minute-aligned: the same seed gives the same topic contents. */
    static final long BASE_MS = 1_767_225_600_000L;

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

    static String value(int keyIdx, long seq) {
        return "{\"user\":\"" + key(keyIdx) + "\",\"seq\":" + seq + ",\"amount\":" + (seq * 7919 % 1000) + "}";
    }

    /** (key, window) pairs, one per record, packed into longs; the expected rows are their counts. */
    static final class Expected {
        final long originMinute;
        long[] pairs = new long[1 << 16];
        int n;

        Expected(long originMinute) { this.originMinute = originMinute; }

        void add(int keyIdx, long ts) {
            long minute = Math.floorDiv(ts, WINDOW_MS) - originMinute;
            if (keyIdx >= 1L << KEY_BITS || minute < 0 || minute >= 1L << MINUTE_BITS)
                throw new IllegalStateException("key " + keyIdx + " or minute " + minute + " out of range");
            if (n == pairs.length) pairs = Arrays.copyOf(pairs, n * 2);
            pairs[n++] = (long) keyIdx << MINUTE_BITS | minute;
        }

        /** The canonical rows of every window, sorted as the collected outputs are. */
        void write(Path f) throws IOException {
            long[] p = Arrays.copyOf(pairs, n);
            Arrays.sort(p);
            List<String> rows = new ArrayList<>();
            for (int i = 0; i < n; ) {
                int j = i;
                while (j < n && p[j] == p[i]) j++;
                long minute = p[i] & ((1L << MINUTE_BITS) - 1);
                rows.add(key((int) (p[i] >>> MINUTE_BITS)) + "," + (minute + originMinute) * WINDOW_MS + "," + (j - i));
                i = j;
            }
            Collections.sort(rows);
            Files.write(f, rows);
            expectedRows = rows.size();
        }

        int expectedRows;
    }

    /** One record per partition far past the last event time, so that every real window closes on every
     * side: Kafka Streams closes windows per task (input partition) on that partition's stream time,
     * Flink on the minimum watermark over the partitions, Spark on one global watermark (its real-time
     * suppress on each partition's stream time); the flush windows never close and are not results. */
    static void flush(KafkaProducer<String, String> prod, String topic, int partitions, long lastTs) {
        long ts = Math.floorDiv(lastTs, WINDOW_MS) * WINDOW_MS + 3_600_000L;
        for (int p = 0; p < partitions; p++)
            prod.send(new ProducerRecord<>(topic, p, ts, "~flush-" + p, "flush"));
    }

    static long checkDisorder(Map<String, String> a, long graceMs) {
        // Kafka Streams drops a record whose window ended at or before stream time - grace, Spark one
        // whose window ended at or before its watermark (max event time - grace); a record at most
        // disorder behind every record before it is in a window that ends after both as long as
        // disorder < grace, with room left for the partitions' offset ranges in a micro-batch (or the
        // upstream tasks of a real-time shuffle) not being at the same place in production order.
        long d = Long.parseLong(KafkaIo.req(a, "disorder-ms"));
        if (d < 0 || d > graceMs / 2) throw new IllegalArgumentException("--disorder-ms must be in [0, " + graceMs / 2 + "]");
        return d;
    }

    static void backlog(Map<String, String> a) throws Exception {
        String bootstrap = KafkaIo.req(a, "bootstrap"), topic = KafkaIo.req(a, "topic");
        long records = Long.parseLong(KafkaIo.req(a, "records"));
        int keys = Integer.parseInt(KafkaIo.req(a, "keys"));
        long spanMs = Long.parseLong(KafkaIo.req(a, "span-s")) * 1000;
        long disorderMs = checkDisorder(a, Long.parseLong(a.getOrDefault("grace-ms", "10000")));
        long seed = Long.parseLong(KafkaIo.req(a, "seed"));
        Zipf zipf = new Zipf(keys, Double.parseDouble(KafkaIo.req(a, "zipf")), seed);
        SplittableRandom jitter = new SplittableRandom(seed ^ 0x5DEECE66DL);
        int parts = KafkaIo.partitions(bootstrap, topic);
        Expected exp = new Expected(Math.floorDiv(BASE_MS, WINDOW_MS) - 1);
        long[] bytes = {0}, maxTs = {Long.MIN_VALUE}, maxBehind = {0}, minTs = {Long.MAX_VALUE};
        long[] perPartition = new long[parts];
        Pace pace;
        try (KafkaProducer<String, String> prod = KafkaIo.producer(bootstrap)) {
            pace = Pace.backlog(records, i -> {
                int k = zipf.next();
                // Event times advance evenly over the span; each record is up to disorderMs behind its
                // place, so no record is more than disorderMs behind any record produced before it.
                long ts = BASE_MS + (long) ((double) i * spanMs / records) - jitter.nextLong(disorderMs + 1);
                String key = key(k), v = value(k, i);
                perPartition[KafkaIo.partitionOf(key, parts)]++;
                prod.send(new ProducerRecord<>(topic, null, ts, key, v));
                exp.add(k, ts);
                bytes[0] += key.length() + v.length();
                if (i > 0) maxBehind[0] = Math.max(maxBehind[0], maxTs[0] - ts);
                maxTs[0] = Math.max(maxTs[0], ts);
                minTs[0] = Math.min(minTs[0], ts);
            });
            flush(prod, topic, parts, maxTs[0]);
            prod.flush();
        }
        exp.write(Path.of(KafkaIo.req(a, "expected")));
        System.out.println("{\"records\": " + records + ", \"keys\": " + keys + ", \"bytes\": " + bytes[0]
                + ", \"expected_rows\": " + exp.expectedRows + ", \"first_ts\": " + minTs[0] + ", \"last_ts\": " + maxTs[0]
                + ", \"max_behind_ms\": " + maxBehind[0] + ", \"per_partition\": " + Arrays.toString(perPartition)
                + ", " + pace.summary() + "}");
    }

    static void rate(Map<String, String> a) throws Exception {
        String bootstrap = KafkaIo.req(a, "bootstrap"), topic = KafkaIo.req(a, "topic");
        double rate = Double.parseDouble(KafkaIo.req(a, "rate"));
        long durationMs = Long.parseLong(KafkaIo.req(a, "duration-s")) * 1000;
        int keys = Integer.parseInt(KafkaIo.req(a, "keys"));
        long graceMs = Long.parseLong(a.getOrDefault("grace-ms", "10000"));
        long disorderMs = checkDisorder(a, graceMs);
        long seed = Long.parseLong(KafkaIo.req(a, "seed"));
        Zipf zipf = new Zipf(keys, Double.parseDouble(KafkaIo.req(a, "zipf")), seed);
        SplittableRandom jitter = new SplittableRandom(seed ^ 0x5DEECE66DL);
        int parts = KafkaIo.partitions(bootstrap, topic);
        Expected exp = new Expected(Math.floorDiv(System.currentTimeMillis(), WINDOW_MS) - 1);
        // Per partition: the largest timestamp sent, and the next window (in minutes) not yet closed
        // there; a record that moves the partition's largest timestamp past a window's end + grace
        // closes it on that partition (Kafka Streams' task clock, the earliest any side can close it).
        long[] maxTs = new long[parts], closedUpTo = new long[parts];
        Arrays.fill(maxTs, Long.MIN_VALUE);
        Arrays.fill(closedUpTo, Long.MIN_VALUE);
        // "p windowStart sentMs ackedMs" per closing record (the ack time added by the send callback).
        List<String> closes = Collections.synchronizedList(new ArrayList<>());
        Pace pace;
        try (KafkaProducer<String, String> prod = KafkaIo.producer(bootstrap)) {
            pace = Pace.live(rate, durationMs, i -> {
                int k = zipf.next();
                long wall = System.currentTimeMillis();
                long ts = wall - jitter.nextLong(disorderMs + 1);
                String key = key(k), v = value(k, i);
                int p = KafkaIo.partitionOf(key, parts);
                exp.add(k, ts);
                List<String> closing = new ArrayList<>();
                if (ts > maxTs[p]) {
                    maxTs[p] = ts;
                    long closable = Math.floorDiv(ts - graceMs - WINDOW_MS, WINDOW_MS); // last closed window
                    if (closedUpTo[p] == Long.MIN_VALUE) closedUpTo[p] = closable + 1;
                    for (; closedUpTo[p] <= closable; closedUpTo[p]++)
                        closing.add(p + " " + closedUpTo[p] * WINDOW_MS + " " + wall);
                }
                if (closing.isEmpty()) prod.send(new ProducerRecord<>(topic, p, ts, key, v));
                else prod.send(new ProducerRecord<>(topic, p, ts, key, v), (md, e) -> {
                    long acked = System.currentTimeMillis();
                    for (String c : closing) closes.add(c + " " + acked);
                });
            });
            // The flush records wait a second after the last real ones: a side whose partitions share one
            // clock downstream (sluice's real-time suppress: each shuffle partition's stream time is the
            // largest event time from either source task) would otherwise drop as late the last records
            // of the partition read a moment behind the other's flush record.
            prod.flush();
            Thread.sleep(1000);
            flush(prod, topic, parts, Arrays.stream(maxTs).max().getAsLong());
            prod.flush();
        }
        exp.write(Path.of(KafkaIo.req(a, "expected")));
        Files.write(Path.of(KafkaIo.req(a, "closes")), closes);
        System.out.println("{\"records\": " + pace.sent + ", \"expected_rows\": " + exp.expectedRows + ", "
                + pace.summary() + "}");
    }
}
