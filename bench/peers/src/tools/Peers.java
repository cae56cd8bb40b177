// The tools of bench/peers (one mode per invocation; the last stdout line is JSON):
//
//   nexmark        --bootstrap B --topic T --events N --event-rate R --seed S --out-dir D
//                  a seeded Nexmark backlog (see Nexmark.java), event time n * 1000 / R ms after a fixed
//                  start, then two waves of flush events; writes D/expected-<q>.rows for q5 q7 q8 q11
//   nexmark-live   --bootstrap B --topic T --rate R --duration-s S --seed S --out-dir D
//                  the same stream at R events/s of wall-clock time, event time = the send time
//   count-expected --in BENCH_ROWS --out FILE    bench/kafka_streams' expected rows as canonical lines
//   watch          --bootstrap B --topic O --count N --timeout-s T [--settle-ms 2000]
//   collect        --bootstrap B --topic O --query Q --expected FILE --out FILE [--lateness-ms L --last-event-ms T]
//   diff           FILE FILE
//   last-event-ms  --bootstrap B --topic T      the latest timestamp before each partition's last record
//                                               (bench/kafka_streams' live producer ends with one flush record)
//
// Every event goes to partition n % 2 (no key), with the event time as its record timestamp (and as
// dateTime in the JSON value).
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.time.Duration;
import java.util.*;

import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.serialization.LongSerializer;
import org.apache.kafka.common.utils.Utils;

public final class Peers {
    public static void main(String[] argv) throws Exception {
        String mode = argv[0];
        Map<String, String> a = mode.equals("diff") ? Map.of() : Bench.args(Arrays.copyOfRange(argv, 1, argv.length));
        switch (mode) {
            case "nexmark" -> nexmark(a, false);
            case "nexmark-live" -> nexmark(a, true);
            case "count-expected" -> countExpected(a);
            case "watch" -> System.exit(watch(a));
            case "collect" -> collect(a);
            case "diff" -> diff(Path.of(argv[1]), Path.of(argv[2]));
            case "last-event-ms" -> lastEventMs(a);
            default -> throw new IllegalArgumentException("unknown mode " + mode);
        }
    }

    static String req(Map<String, String> a, String k) {
        return Bench.req(a, k);
    }

    // ------------------------------------------------------------------ the Nexmark producer

    static void nexmark(Map<String, String> a, boolean live) throws Exception {
        String bootstrap = req(a, "bootstrap"), topic = req(a, "topic");
        long seed = Long.parseLong(req(a, "seed"));
        Path outDir = Path.of(req(a, "out-dir"));
        Files.createDirectories(outDir);
        int parts = Bench.partitions(bootstrap, topic);
        SplittableRandom rnd = new SplittableRandom(seed);
        Reference ref = new Reference();
        Nexmark.Event ev = new Nexmark.Event();
        long[] perType = new long[3];
        long bytes = 0, n = 0, lastTs = Long.MIN_VALUE, lateSends = 0;
        long t0 = System.nanoTime();
        try (KafkaProducer<String, String> prod = Bench.producer(bootstrap)) {
            if (!live) {
                long events = Long.parseLong(req(a, "events")), rate = Long.parseLong(req(a, "event-rate"));
                for (; n < events; n++) {
                    long ts = Nexmark.BASE_MS + n * 1000 / rate;
                    String v = Nexmark.json(n, ts, rnd, ev);
                    prod.send(new ProducerRecord<>(topic, (int) (n % parts), ts, null, v));
                    ref.accept(ev, ts);
                    perType[ev.event_type]++;
                    bytes += v.length();
                    lastTs = ts;
                }
            } else {
                double rate = Double.parseDouble(req(a, "rate"));
                long durationNs = Long.parseLong(req(a, "duration-s")) * 1_000_000_000L;
                long startNs = System.nanoTime();
                while (true) {
                    long due = startNs + (long) (n * 1e9 / rate), now = System.nanoTime();
                    if (due - startNs >= durationNs) break;
                    if (due > now) {
                        long wait = due - now;
                        if (wait > 200_000) Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                        continue;
                    }
                    if (now - due > 100_000_000L) lateSends++;
                    long ts = Math.max(System.currentTimeMillis(), lastTs); // event time = send time
                    String v = Nexmark.json(n, ts, rnd, ev);
                    prod.send(new ProducerRecord<>(topic, (int) (n % parts), ts, null, v));
                    ref.accept(ev, ts);
                    perType[ev.event_type]++;
                    bytes += v.length();
                    lastTs = ts;
                    n++;
                }
            }
            // Two flush waves (see Nexmark.FLUSH_IDS): the first closes every real window on every side;
            // the second closes the first wave's windows, so that Kafka Streams' second stage (q5, q7),
            // whose clock moves only with the first stage's results, closes its last real windows too.
            long flushBase = Math.floorDiv(lastTs, 60_000L) * 60_000L;
            for (int wave = 1; wave <= 2; wave++)
                for (int p = 0; p < parts; p++)
                    for (int type = 0; type < 3; type++)
                        for (long id = -1; id >= -Nexmark.FLUSH_IDS; id--)
                            prod.send(new ProducerRecord<>(topic, p, flushBase + wave * 3_600_000L, null,
                                    Nexmark.flushJson(type, id, flushBase + wave * 3_600_000L)));
            prod.flush();
        }
        double secs = (System.nanoTime() - t0) / 1e9;
        ref.finish();
        StringBuilder s = new StringBuilder("{\"events\": " + n + ", \"persons\": " + perType[0] + ", \"auctions\": "
                + perType[1] + ", \"bids\": " + perType[2] + ", \"bytes\": " + bytes + ", \"first_ts\": "
                + (live ? -1 : Nexmark.BASE_MS) + ", \"last_event_ms\": " + lastTs + ", \"produce_s\": "
                + String.format("%.2f", secs) + ", \"achieved_rate\": " + String.format("%.0f", n / secs)
                + ", \"sends_over_100ms_late\": " + lateSends + ", \"session_gap_ties\": " + ref.sessionGapTies
                + ", \"flush_ids_cover_partitions\": " + flushCoverage(parts) + ", \"expected_rows\": {");
        String sep = "";
        for (Map.Entry<String, List<String>> q : new TreeMap<>(ref.rows()).entrySet()) {
            List<String> rows = q.getValue();
            Collections.sort(rows);
            Files.write(outDir.resolve("expected-" + q.getKey() + ".rows"), rows);
            s.append(sep).append('"').append(q.getKey()).append("\": ").append(rows.size());
            sep = ", ";
        }
        System.out.println(s.append("}}"));
    }

    /** Whether ids -1..-FLUSH_IDS, as Kafka Streams' Long key serde writes them, hash to every partition. */
    static boolean flushCoverage(int parts) {
        Set<Integer> seen = new HashSet<>();
        try (LongSerializer ser = new LongSerializer()) {
            for (long id = -1; id >= -Nexmark.FLUSH_IDS; id--)
                seen.add(Utils.toPositive(Utils.murmur2(ser.serialize("t", id))) % parts);
        }
        return seen.size() == parts;
    }

    // ------------------------------------------------------------------ the count query's expected rows

    static void countExpected(Map<String, String> a) throws IOException {
        Bench.Rows r = Bench.readRows(Path.of(req(a, "in")));
        long countMask = (1L << Bench.COUNT_BITS) - 1, minuteMask = (1L << Bench.MINUTE_BITS) - 1;
        List<String> out = new ArrayList<>(r.rows().length);
        for (long x : r.rows()) {
            long key = x >>> (Bench.MINUTE_BITS + Bench.COUNT_BITS);
            long minute = (x >>> Bench.COUNT_BITS) & minuteMask;
            out.add(Bench.key((int) key) + "," + (minute + r.originMinute()) * Bench.WINDOW_MS + "," + (x & countMask));
        }
        Collections.sort(out);
        Files.write(Path.of(req(a, "out")), out);
        System.out.println("{\"rows\": " + out.size() + "}");
    }

    static void lastEventMs(Map<String, String> a) throws Exception {
        long last = Long.MIN_VALUE;
        try (KafkaConsumer<String, String> c = Bench.consumer(req(a, "bootstrap"))) {
            List<TopicPartition> tps = Bench.topicPartitions(c, req(a, "topic"));
            Map<TopicPartition, Long> end = c.endOffsets(tps);
            for (TopicPartition tp : tps) {
                if (end.get(tp) < 2) continue;
                c.assign(List.of(tp));
                c.seek(tp, end.get(tp) - 2);
                ConsumerRecords<String, String> rs = ConsumerRecords.empty();
                for (int i = 0; i < 30 && rs.isEmpty(); i++) rs = c.poll(Duration.ofSeconds(1));
                for (ConsumerRecord<String, String> r : rs)
                    if (r.offset() == end.get(tp) - 2) last = Math.max(last, r.timestamp());
            }
        }
        System.out.println("{\"last_event_ms\": " + last + "}");
    }

    // ------------------------------------------------------------------ output side

    /** Polls the output topic's end offsets until they reach `count`, then until they stop moving for
     * `settle-ms` (the flush events' own rows may come with the last real ones). */
    static int watch(Map<String, String> a) throws Exception {
        long count = Long.parseLong(req(a, "count"));
        long deadline = System.currentTimeMillis() + Long.parseLong(req(a, "timeout-s")) * 1000;
        long settle = Long.parseLong(a.getOrDefault("settle-ms", "2000"));
        try (KafkaConsumer<String, String> c = Bench.consumer(req(a, "bootstrap"))) {
            List<TopicPartition> tps = Bench.topicPartitions(c, req(a, "topic"));
            long n = -1, changed = System.currentTimeMillis(), reachedAt = -1;
            while (System.currentTimeMillis() < deadline) {
                long m = c.endOffsets(tps).values().stream().mapToLong(Long::longValue).sum();
                long now = System.currentTimeMillis();
                if (m != n) { n = m; changed = now; }
                if (n >= count && reachedAt < 0) reachedAt = now;
                if (reachedAt >= 0 && now - changed >= settle) {
                    System.out.println("{\"reached\": " + n + ", \"at_ms\": " + reachedAt + "}");
                    return 0;
                }
                Thread.sleep(100);
            }
            System.out.println("{\"timeout\": true, \"records\": " + n + "}");
            return 2;
        }
    }

    /** Reads a whole output topic: its rows (sorted, to --out; the flush events' own rows apart), the first
     * and last broker append times of real rows, the differing rows against --expected, and with
     * --last-event-ms the latency of every row whose window closed by a real event: its append time
     * minus the close time (window end + lateness; event time is the producer's clock at send). */
    static void collect(Map<String, String> a) throws Exception {
        String q = req(a, "query");
        long lateness = Long.parseLong(a.getOrDefault("lateness-ms", "0"));
        long lastEvent = Long.parseLong(a.getOrDefault("last-event-ms", "-1"));
        List<String> rows = new ArrayList<>();
        long flushRows = 0, firstAppend = Long.MAX_VALUE, lastAppend = Long.MIN_VALUE, untimed = 0;
        long[] lat = new long[1 << 12];
        int nl = 0;
        try (KafkaConsumer<String, String> c = Bench.consumer(req(a, "bootstrap"))) {
            List<TopicPartition> tps = Bench.topicPartitions(c, req(a, "topic"));
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps);
            while (tps.stream().anyMatch(tp -> c.position(tp) < end.get(tp))) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofSeconds(1))) {
                    if (r.timestampType() != TimestampType.LOG_APPEND_TIME)
                        throw new IllegalStateException("output topic must use LogAppendTime");
                    String row = r.value();
                    if (Queries.isFlushRow(q, row)) { flushRows++; continue; }
                    rows.add(row);
                    firstAppend = Math.min(firstAppend, r.timestamp());
                    lastAppend = Math.max(lastAppend, r.timestamp());
                    if (lastEvent >= 0) {
                        long close = Queries.closeTime(q, row, lateness);
                        if (close > lastEvent) { untimed++; continue; }
                        if (nl == lat.length) lat = Arrays.copyOf(lat, nl * 2);
                        lat[nl++] = r.timestamp() - close;
                    }
                }
            }
        }
        Collections.sort(rows);
        Files.write(Path.of(req(a, "out")), rows);
        List<String> expected = Files.readAllLines(Path.of(req(a, "expected")));
        StringBuilder s = new StringBuilder("{\"rows\": " + rows.size() + ", \"flush_rows\": " + flushRows
                + ", \"first_append_ms\": " + firstAppend + ", \"last_append_ms\": " + lastAppend
                + ", \"expected_rows\": " + expected.size() + ", \"differing_from_expected\": "
                + differing(rows, expected, null));
        if (lastEvent >= 0) {
            long[] l = Arrays.copyOf(lat, nl);
            Arrays.sort(l);
            s.append(", \"latency_rows\": ").append(nl).append(", \"rows_closed_by_flush\": ").append(untimed);
            if (nl > 0)
                s.append(", \"latency_min_ms\": ").append(l[0]).append(", \"latency_p50_ms\": ").append(Bench.pct(l, 0.5))
                        .append(", \"latency_p99_ms\": ").append(Bench.pct(l, 0.99)).append(", \"latency_max_ms\": ")
                        .append(l[nl - 1]);
        }
        System.out.println(s.append("}"));
    }

    /** Rows in one sorted multiset and not in the other, both ways; the first few of each kind to `show`. */
    static long differing(List<String> x, List<String> y, List<String> show) {
        int i = 0, j = 0;
        long d = 0;
        while (i < x.size() || j < y.size()) {
            int c = i == x.size() ? 1 : j == y.size() ? -1 : x.get(i).compareTo(y.get(j));
            if (c == 0) { i++; j++; continue; }
            d++;
            if (show != null && show.size() < 10) show.add((c < 0 ? "- " + x.get(i) : "+ " + y.get(j)));
            if (c < 0) i++; else j++;
        }
        return d;
    }

    static void diff(Path x, Path y) throws IOException {
        List<String> show = new ArrayList<>();
        long d = differing(Files.readAllLines(x), Files.readAllLines(y), show);
        StringBuilder s = new StringBuilder("{\"differing\": " + d + ", \"examples\": [");
        for (int i = 0; i < show.size(); i++)
            s.append(i > 0 ? ", " : "").append('"').append(show.get(i).replace("\"", "'")).append('"');
        System.out.println(s.append("]}"));
    }
}
