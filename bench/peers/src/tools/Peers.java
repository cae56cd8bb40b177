// The tools of bench/peers (one mode per invocation; the last stdout line is JSON):
//
//   create-topic   --bootstrap B --topic T --partitions P [--log-append-time]
//   nexmark        --bootstrap B --topic T --events N --event-rate R --seed S --out-dir D
//                  --lateness-ms L
//                  a seeded Nexmark backlog (see Nexmark.java), event time n * 1000 / R ms after a fixed
//                  start; writes D/expected-<q>.rows for q5 q7 q8 q11: the reference's rows of the windows
//                  that close by cut_ms (printed)
//   nexmark-live   --bootstrap B --topic T --rate R --duration-s S --seed S --out-dir D --lateness-ms L
//                  the same stream at R events/s of wall-clock time, event time = the send time
//   nexmark-file   --out FILE --events N --event-rate R --seed S
//                  the backlog's record values, one JSON per line, for the probes (probes.py)
//   backlog, rate  the windowed count's keyed records (CountData.java)
//   watch          --bootstrap B --topic O --count N --timeout-s T [--settle-ms 2000] [--idle-s S]
//                  [--query Q --lateness-ms L --cut-ms C]
//   collect        --bootstrap B --topic O --query Q --expected FILE --out FILE [--lateness-ms L --cut-ms C]
//                  [--last-event-ms T | --closes FILE [--windows-out FILE]]
//   diff           FILE FILE
//
// Every Nexmark event goes to partition n % 2 (no key), with the event time as its record timestamp
// (and as dateTime in the JSON value).
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.time.Duration;
import java.util.*;

import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.record.TimestampType;

public final class Peers {
    public static void main(String[] argv) throws Exception {
        String mode = argv[0];
        Map<String, String> a = mode.equals("diff") ? Map.of() : KafkaIo.args(Arrays.copyOfRange(argv, 1, argv.length));
        switch (mode) {
            case "create-topic" -> KafkaIo.createTopic(a);
            case "nexmark" -> nexmark(a, false);
            case "nexmark-live" -> nexmark(a, true);
            case "nexmark-file" -> nexmarkFile(a);
            case "backlog" -> CountData.backlog(a);
            case "rate" -> CountData.rate(a);
            case "watch" -> System.exit(watch(a));
            case "collect" -> collect(a);
            case "diff" -> diff(Path.of(argv[1]), Path.of(argv[2]));
            default -> throw new IllegalArgumentException("unknown mode " + mode);
        }
    }

    static String req(Map<String, String> a, String k) {
        return KafkaIo.req(a, k);
    }

    // ------------------------------------------------------------------ the Nexmark producer

    static void nexmark(Map<String, String> a, boolean live) throws Exception {
        String bootstrap = req(a, "bootstrap"), topic = req(a, "topic");
        long seed = Long.parseLong(req(a, "seed"));
        Path outDir = Path.of(req(a, "out-dir"));
        Files.createDirectories(outDir);
        int parts = KafkaIo.partitions(bootstrap, topic);
        SplittableRandom rnd = new SplittableRandom(seed);
        Reference ref = new Reference();
        Nexmark.Event ev = new Nexmark.Event();
        long[] perType = new long[3], bytes = {0}, lastTs = {Long.MIN_VALUE};
        long rate = Long.parseLong(req(a, live ? "rate" : "event-rate"));
        Pace pace;
        try (KafkaProducer<String, String> prod = KafkaIo.producer(bootstrap)) {
            Pace.Send send = n -> {
                // A backlog's event time is fixed by n; a live stream's is the send time (never behind
                // the previous event's: the reference takes events in event-time order).
                long ts = live ? Math.max(System.currentTimeMillis(), lastTs[0]) : Nexmark.BASE_MS + n * 1000 / rate;
                String v = Nexmark.json(n, ts, rnd, ev);
                prod.send(new ProducerRecord<>(topic, (int) (n % parts), ts, null, v));
                ref.accept(ev, ts);
                perType[ev.event_type]++;
                bytes[0] += v.length();
                lastTs[0] = ts;
            };
            pace = live ? Pace.live(rate, Long.parseLong(req(a, "duration-s")) * 1000, send)
                    : Pace.backlog(Long.parseLong(req(a, "events")), send);
            prod.flush();
        }
        ref.finish();
        // No flush events: every side closes a window when its clock passes the window's end plus the
        // lateness, and those clocks stop short of the last event differently (Kafka Streams per task,
        // and its second stage of q5/q7 one window and lateness later; Flink by the watermark; Spark by
        // its watermark in the next micro-batch). Rows are compared for the windows that close by
        // cut_ms, which every side reaches with the backlog's own events; later windows are not.
        long lateMs = Long.parseLong(req(a, "lateness-ms"));
        long cut = lastTs[0] - 2 * (Queries.Q5_SIZE_MS + lateMs) - 2000;
        StringBuilder s = new StringBuilder("{\"events\": " + pace.sent + ", \"persons\": " + perType[0] + ", \"auctions\": "
                + perType[1] + ", \"bids\": " + perType[2] + ", \"bytes\": " + bytes[0] + ", \"first_ts\": "
                + (live ? -1 : Nexmark.BASE_MS) + ", \"last_event_ms\": " + lastTs[0] + ", " + pace.summary()
                + ", \"session_gap_ties\": " + ref.sessionGapTies
                + ", \"cut_ms\": " + cut + ", \"expected_rows\": {");
        String sep = "";
        for (Map.Entry<String, List<String>> q : new TreeMap<>(ref.rows()).entrySet()) {
            List<String> rows = new ArrayList<>();
            for (String r : q.getValue()) if (Queries.closeTime(q.getKey(), r, lateMs) <= cut) rows.add(r);
            Collections.sort(rows);
            Files.write(outDir.resolve("expected-" + q.getKey() + ".rows"), rows);
            s.append(sep).append('"').append(q.getKey()).append("\": ").append(rows.size());
            sep = ", ";
        }
        System.out.println(s.append("}}"));
    }

    /** The values `nexmark` would send for the same seed and event rate, one per line. */
    static void nexmarkFile(Map<String, String> a) throws Exception {
        long events = Long.parseLong(req(a, "events")), rate = Long.parseLong(req(a, "event-rate"));
        SplittableRandom rnd = new SplittableRandom(Long.parseLong(req(a, "seed")));
        Nexmark.Event ev = new Nexmark.Event();
        long bytes = 0;
        try (Writer w = Files.newBufferedWriter(Path.of(req(a, "out")), StandardCharsets.UTF_8)) {
            for (long n = 0; n < events; n++) {
                String v = Nexmark.json(n, Nexmark.BASE_MS + n * 1000 / rate, rnd, ev);
                w.write(v);
                w.write('\n');
                bytes += v.length();
            }
        }
        System.out.println("{\"events\": " + events + ", \"bytes\": " + bytes + "}");
    }

    // ------------------------------------------------------------------ output side

    /** Waits until the output has `count` rows: with --cut-ms, rows of windows that close by then (read
     * as they come); without, records (the topic's end offsets). Then until nothing new comes for
     * `settle-ms`. */
    static int watch(Map<String, String> a) throws Exception {
        long count = Long.parseLong(req(a, "count"));
        long deadline = System.currentTimeMillis() + Long.parseLong(req(a, "timeout-s")) * 1000;
        long settle = Long.parseLong(a.getOrDefault("settle-ms", "2000"));
        long idle = Long.parseLong(a.getOrDefault("idle-s", "0")) * 1000;
        String q = a.get("query");
        long cut = Long.parseLong(a.getOrDefault("cut-ms", String.valueOf(Long.MAX_VALUE)));
        long lateness = Long.parseLong(a.getOrDefault("lateness-ms", "0"));
        try (KafkaConsumer<String, String> c = KafkaIo.consumer(req(a, "bootstrap"))) {
            List<TopicPartition> tps = KafkaIo.topicPartitions(c, req(a, "topic"));
            if (a.containsKey("cut-ms")) {
                c.assign(tps);
                c.seekToBeginning(tps);
            }
            long n = 0, records = -1, changed = System.currentTimeMillis(), reachedAt = -1;
            while (System.currentTimeMillis() < deadline) {
                long m;
                if (a.containsKey("cut-ms")) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100)))
                        if (!Queries.isFlushRow(q, r.value()) && Queries.closeTime(q, r.value(), lateness) <= cut) n++;
                    m = tps.stream().mapToLong(c::position).sum();
                } else {
                    n = m = c.endOffsets(tps).values().stream().mapToLong(Long::longValue).sum();
                    Thread.sleep(100);
                }
                long now = System.currentTimeMillis();
                if (m != records) { records = m; changed = now; }
                if (n >= count && reachedAt < 0) reachedAt = now;
                if (reachedAt >= 0 && now - changed >= settle) {
                    System.out.println("{\"reached\": " + n + ", \"records\": " + records + ", \"at_ms\": " + reachedAt + "}");
                    return 0;
                }
                // A side that lost rows (late drops) never reaches the count: give up once its output,
                // having started, has not moved for idle-s.
                if (idle > 0 && records > 0 && reachedAt < 0 && now - changed >= idle) {
                    System.out.println("{\"timeout\": true, \"idle\": true, \"rows\": " + n + ", \"records\": " + records + "}");
                    return 2;
                }
            }
            System.out.println("{\"timeout\": true, \"rows\": " + n + ", \"records\": " + records + "}");
            return 2;
        }
    }

    /** Reads a whole output topic: its rows (sorted, to --out; the count's flush rows and, with --cut-ms,
     * rows of windows closing after the cut apart), the first and last broker append times of those
     * rows, the differing rows against --expected, and the latency of each final result:
     * - with --last-event-ms (a live Nexmark stream, event time = send time): its append time minus
     *   the instant its window closed on the producer's clock (window end + lateness), for every row
     *   whose window closed by a real event;
     * - with --closes (the windowed count's live stream, CountData rate): its append time minus the
     *   send of the record that closed its window on its key's input partition, and minus that send's
     *   broker acknowledgement (which takes the producer's own delays out); rows of windows only the
     *   flush records closed are not timed. Either way the rows of the first window to close are the
     *   warm-up, counted apart (warmup_rows, warmup_window, warmup_max_ms). With --windows-out, per timed (input partition, window):
     *   "partition windowStart sent acked firstAppend lastAppend rows firstEmit firstSend lastEmit"
     *   (firstEmit, lastEmit: the least and the largest record key, a Spark side's emit stamp; firstSend:
     *   the least SendStamp header; -1 where absent), the split of its results'
     *   latency into the wait for its first result and the time its burst of results took. */
    static void collect(Map<String, String> a) throws Exception {
        String q = req(a, "query");
        long lateness = Long.parseLong(a.getOrDefault("lateness-ms", "0"));
        long lastEvent = Long.parseLong(a.getOrDefault("last-event-ms", "-1"));
        long cut = Long.parseLong(a.getOrDefault("cut-ms", String.valueOf(Long.MAX_VALUE)));
        Map<String, long[]> closes = a.containsKey("closes") ? readCloses(Path.of(a.get("closes"))) : null;
        List<String> rows = new ArrayList<>();
        long afterCut = 0, flushRows = 0, firstAppend = Long.MAX_VALUE, lastAppend = Long.MIN_VALUE, untimed = 0;
        // per timed row: its latency, from the ack, and its window
        long[] lat = new long[1 << 12], latAck = new long[1 << 12], latWindow = new long[1 << 12];
        int nl = 0;
        Map<String, long[]> windows = new TreeMap<>(); // "partition windowStart" -> {sent, acked, first, last, rows}
        long warmFrom = Long.parseLong(a.getOrDefault("warm-from-ms", "-1"));
        List<long[]> progress = new ArrayList<>(); // with --warm-from-ms: {append, close} of every row
        try (KafkaConsumer<String, String> c = KafkaIo.consumer(req(a, "bootstrap"))) {
            List<TopicPartition> tps = KafkaIo.topicPartitions(c, req(a, "topic"));
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps);
            while (tps.stream().anyMatch(tp -> c.position(tp) < end.get(tp))) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofSeconds(1))) {
                    if (r.timestampType() != TimestampType.LOG_APPEND_TIME)
                        throw new IllegalStateException("output topic must use LogAppendTime");
                    String row = r.value();
                    if (Queries.isFlushRow(q, row)) { flushRows++; continue; }
                    long close = Queries.closeTime(q, row, lateness);
                    if (close > cut) { afterCut++; continue; }
                    rows.add(row);
                    if (warmFrom >= 0) progress.add(new long[]{r.timestamp(), close});
                    firstAppend = Math.min(firstAppend, r.timestamp());
                    lastAppend = Math.max(lastAppend, r.timestamp());
                    long[] closed = null; // {sent, acked} of the closing record
                    long window; // the count: the window's start; Nexmark: its close
                    if (closes != null) {
                        String[] f = row.split(",", 3);
                        window = Long.parseLong(f[1]);
                        String w = KafkaIo.partitionOf(f[0], 2) + " " + f[1];
                        closed = closes.get(w);
                        if (closed != null) {
                            long[] sentAcked = closed;
                            long[] x = windows.computeIfAbsent(w, k -> new long[]{sentAcked[0], sentAcked[1],
                                    Long.MAX_VALUE, Long.MIN_VALUE, 0, Long.MAX_VALUE, Long.MAX_VALUE, Long.MIN_VALUE});
                            x[2] = Math.min(x[2], r.timestamp());
                            x[3] = Math.max(x[3], r.timestamp());
                            x[4]++;
                            // a Spark side run with --stamp-emit keys each result by the wall clock at which
                            // the operator above suppress passed it on
                            if (r.key() != null) {
                                x[5] = Math.min(x[5], Long.parseLong(r.key()));
                                x[7] = Math.max(x[7], Long.parseLong(r.key()));
                            }
                            // and by SendStamp's header: when Spark's writer handed it to the producer
                            var sent = r.headers().lastHeader(SendStamp.HEADER);
                            if (sent != null)
                                x[6] = Math.min(x[6], Long.parseLong(new String(sent.value(), StandardCharsets.UTF_8)));
                        }
                    } else if (lastEvent >= 0) {
                        window = close;
                        closed = close > lastEvent ? null : new long[]{close, close};
                    } else continue;
                    if (closed == null) { untimed++; continue; }
                    if (nl == lat.length) {
                        lat = Arrays.copyOf(lat, nl * 2);
                        latAck = Arrays.copyOf(latAck, nl * 2);
                        latWindow = Arrays.copyOf(latWindow, nl * 2);
                    }
                    latWindow[nl] = window;
                    latAck[nl] = r.timestamp() - closed[1];
                    lat[nl++] = r.timestamp() - closed[0];
                }
            }
        }
        Collections.sort(rows);
        Files.write(Path.of(req(a, "out")), rows);
        if (a.containsKey("windows-out")) {
            List<String> w = new ArrayList<>();
            windows.forEach((k, x) -> w.add(k + " " + x[0] + " " + x[1] + " " + x[2] + " " + x[3] + " " + x[4]
                    + " " + (x[5] == Long.MAX_VALUE ? -1 : x[5]) + " " + (x[6] == Long.MAX_VALUE ? -1 : x[6])
                    + " " + (x[7] == Long.MIN_VALUE ? -1 : x[7])));
            Files.write(Path.of(a.get("windows-out")), w);
        }
        List<String> expected = Files.readAllLines(Path.of(req(a, "expected")));
        StringBuilder s = new StringBuilder("{\"rows\": " + rows.size() + ", \"flush_rows\": " + flushRows
                + ", \"rows_after_cut\": " + afterCut
                + ", \"first_append_ms\": " + firstAppend + ", \"last_append_ms\": " + lastAppend
                + ", \"expected_rows\": " + expected.size() + ", \"differing_from_expected\": "
                + differing(rows, expected, null));
        if (warmFrom >= 0) {
            // The side's progress: by each append, the latest window close (event time) it has output.
            // From the first append at which that reaches warm-from-ms to the last append: the event time
            // the side got through and the wall time it took, without its start (JVM warm-up, planning).
            progress.sort(Comparator.comparingLong(x -> x[0]));
            long reached = Long.MIN_VALUE, fromAppend = -1, fromClose = -1;
            for (long[] x : progress) {
                reached = Math.max(reached, x[1]);
                if (fromAppend < 0 && reached >= warmFrom) { fromAppend = x[0]; fromClose = reached; }
            }
            if (fromAppend >= 0) {
                long[] last = progress.get(progress.size() - 1);
                s.append(", \"warm\": {\"from_append_ms\": ").append(fromAppend).append(", \"to_append_ms\": ")
                        .append(last[0]).append(", \"from_close_ms\": ").append(fromClose).append(", \"to_close_ms\": ")
                        .append(reached).append("}");
            }
        }
        if (closes != null || lastEvent >= 0) {
            // The first window to close is the warm-up: its results are the first a side ever writes, and
            // pay for what it sets up once (Spark's Kafka sink creates its producer at its first row; the
            // code on the way is not yet compiled). Reported apart, as a cold start; the rest are timed.
            // With short windows (bench.py --rate-warmup-s) the windows starting in the run's first seconds
            // are all set apart: a side's first seconds pay for more than its first window.
            long first = Long.MAX_VALUE;
            for (int i = 0; i < nl; i++) first = Math.min(first, latWindow[i]);
            long warmUntil = first + Math.max(1L, Long.getLong("peers.warmupMs", 0L));
            long coldMax = Long.MIN_VALUE;
            int cold = 0, warm = 0;
            for (int i = 0; i < nl; i++) {
                if (latWindow[i] < warmUntil) {
                    cold++;
                    coldMax = Math.max(coldMax, lat[i]);
                } else {
                    lat[warm] = lat[i];
                    latAck[warm++] = latAck[i];
                }
            }
            nl = warm;
            long[] l = Arrays.copyOf(lat, nl), la = Arrays.copyOf(latAck, nl);
            Arrays.sort(l);
            Arrays.sort(la);
            s.append(", \"latency_rows\": ").append(nl).append(", \"rows_untimed\": ").append(untimed)
                    .append(", \"warmup_rows\": ").append(cold);
            if (cold > 0) s.append(", \"warmup_window\": ").append(first).append(", \"warmup_until\": ").append(warmUntil)
                    .append(", \"warmup_max_ms\": ").append(coldMax);
            if (nl > 0) {
                s.append(", \"latency_min_ms\": ").append(l[0]).append(", \"latency_p50_ms\": ").append(KafkaIo.pct(l, 0.5))
                        .append(", \"latency_p99_ms\": ").append(KafkaIo.pct(l, 0.99)).append(", \"latency_max_ms\": ")
                        .append(l[nl - 1]);
                if (closes != null)
                    s.append(", \"from_ack_p50_ms\": ").append(KafkaIo.pct(la, 0.5))
                            .append(", \"from_ack_p99_ms\": ").append(KafkaIo.pct(la, 0.99));
            }
        }
        System.out.println(s.append("}"));
    }

    /** CountData rate's closes file: "partition windowStart" to {sent, acked}. */
    static Map<String, long[]> readCloses(Path f) throws IOException {
        Map<String, long[]> m = new HashMap<>();
        for (String l : Files.readAllLines(f)) {
            String[] x = l.split(" ");
            m.put(x[0] + " " + x[1], new long[]{Long.parseLong(x[2]), Long.parseLong(x[3])});
        }
        return m;
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
