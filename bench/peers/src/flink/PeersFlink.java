// The Flink side of bench/peers: one query per process, as a Flink user writes it with the
// DataStream API: a local MiniCluster in this JVM with parallelism 2, the Kafka source (earliest
// offsets, record timestamps as event time, bounded-out-of-orderness watermarks of the allowed
// lateness), event-time windows (which fire once, when the watermark passes their end: final
// results), Flink's default state backend (hashmap: state as objects on the JVM heap), the Kafka
// sink. Prints JSON lines (config, started, running, stopped) and stops (cancels the job) when "stop"
// comes on stdin.
//
//   PeersFlink --query Q --bootstrap B --input T --output O --lateness-ms L --parallelism 2
//              [--checkpoint-ms MS --checkpoint-dir DIR]
import java.io.*;
import java.nio.file.*;
import java.time.Duration;
import java.util.*;

import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.JobStatus;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.functions.ReduceFunction;
import org.apache.flink.api.common.serialization.SimpleStringSchema;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.*;
import org.apache.flink.configuration.*;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.windowing.ProcessAllWindowFunction;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.*;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.consumer.ConsumerRecord;

public final class PeersFlink {
    /** Parses each Kafka record and emits what the query needs (nothing for other event types). */
    abstract static class Parse<T> implements KafkaRecordDeserializationSchema<T> {
        final TypeInformation<T> type;

        Parse(TypeInformation<T> type) { this.type = type; }

        @Override
        public TypeInformation<T> getProducedType() { return type; }

        @Override
        public void deserialize(ConsumerRecord<byte[], byte[]> r, Collector<T> out) {
            Nexmark.Event e = Nexmark.parse(r.value());
            T t = pick(e);
            if (t != null) out.collect(t);
        }

        abstract T pick(Nexmark.Event e);
    }

    /** Counts the elements of a window. */
    static final class Count<T> implements AggregateFunction<T, Long, Long> {
        public Long createAccumulator() { return 0L; }
        public Long add(T v, Long acc) { return acc + 1; }
        public Long getResult(Long acc) { return acc; }
        public Long merge(Long x, Long y) { return x + y; }
    }

    static final ReduceFunction<Tuple4<Long, Long, Long, Long>> BEST_BID = (x, y) ->
            Queries.q7Better(new long[]{y.f0, y.f1, y.f2, y.f3}, new long[]{x.f0, x.f1, x.f2, x.f3}) ? y : x;

    static DataStream<String> query(StreamExecutionEnvironment env, String q, String bootstrap, String in, long lateMs,
                                    String groupId) {
        if (q.equals("count")) {
            KafkaSource<String> src = KafkaSource.<String>builder().setBootstrapServers(bootstrap).setTopics(in)
                    .setGroupId(groupId).setStartingOffsets(OffsetsInitializer.earliest())
                    .setDeserializer(new KafkaRecordDeserializationSchema<String>() {
                        public void deserialize(ConsumerRecord<byte[], byte[]> r, Collector<String> out) {
                            out.collect(new String(r.key(), java.nio.charset.StandardCharsets.UTF_8));
                        }

                        public TypeInformation<String> getProducedType() { return Types.STRING; }
                    }).build();
            return env.fromSource(src, WatermarkStrategy.<String>forBoundedOutOfOrderness(Duration.ofMillis(lateMs)), "count-in")
                    .keyBy(k -> k, Types.STRING)
                    .window(TumblingEventTimeWindows.of(Duration.ofMillis(Queries.COUNT_WINDOW_MS)))
                    .aggregate(new Count<>(), new ProcessWindowFunction<Long, String, String, TimeWindow>() {
                        public void process(String k, Context c, Iterable<Long> n, Collector<String> out) {
                            out.collect(k + "," + c.window().getStart() + "," + n.iterator().next());
                        }
                    });
        }
        switch (q) {
            case "q5" -> {
                DataStream<Long> auctions = source(env, bootstrap, in, groupId, lateMs, new Parse<Long>(Types.LONG) {
                    Long pick(Nexmark.Event e) { return e.bid == null ? null : e.bid.auction; }
                });
                return auctions.keyBy(x -> x, Types.LONG)
                        .window(SlidingEventTimeWindows.of(Duration.ofMillis(Queries.Q5_SIZE_MS), Duration.ofMillis(Queries.Q5_SLIDE_MS)))
                        .aggregate(new Count<>(), new ProcessWindowFunction<Long, Tuple3<Long, Long, Long>, Long, TimeWindow>() {
                            public void process(Long auction, Context c, Iterable<Long> n, Collector<Tuple3<Long, Long, Long>> out) {
                                out.collect(Tuple3.of(c.window().getStart(), auction, n.iterator().next()));
                            }
                        })
                        // The counts of one sliding window carry its last millisecond as timestamp: a
                        // tumbling window of the slide's length holds exactly one sliding window's counts.
                        .keyBy(t -> t.f0, Types.LONG)
                        .window(TumblingEventTimeWindows.of(Duration.ofMillis(Queries.Q5_SLIDE_MS)))
                        .process(new ProcessWindowFunction<Tuple3<Long, Long, Long>, String, Long, TimeWindow>() {
                            public void process(Long ws, Context c, Iterable<Tuple3<Long, Long, Long>> counts, Collector<String> out) {
                                long max = 0;
                                for (Tuple3<Long, Long, Long> t : counts) max = Math.max(max, t.f2);
                                for (Tuple3<Long, Long, Long> t : counts)
                                    if (t.f2 == max) out.collect(ws + "," + t.f1 + "," + max);
                            }
                        });
            }
            case "q7" -> {
                DataStream<Tuple4<Long, Long, Long, Long>> bids = source(env, bootstrap, in, groupId, lateMs,
                        new Parse<Tuple4<Long, Long, Long, Long>>(Types.TUPLE(Types.LONG, Types.LONG, Types.LONG, Types.LONG)) {
                            Tuple4<Long, Long, Long, Long> pick(Nexmark.Event e) {
                                return e.bid == null ? null : Tuple4.of(e.bid.price, e.bid.dateTime, e.bid.auction, e.bid.bidder);
                            }
                        });
                // Two phases (as Spark's partial aggregation and the Kafka Streams side): the best bid per
                // bucket of auctions and window, then the best of those per window.
                return bids.keyBy(t -> t.f2 & (Queries.Q7_BUCKETS - 1), Types.LONG)
                        .window(TumblingEventTimeWindows.of(Duration.ofMillis(Queries.Q7_SIZE_MS)))
                        .reduce(BEST_BID)
                        .windowAll(TumblingEventTimeWindows.of(Duration.ofMillis(Queries.Q7_SIZE_MS)))
                        .reduce(BEST_BID, new ProcessAllWindowFunction<Tuple4<Long, Long, Long, Long>, String, TimeWindow>() {
                            public void process(Context c, Iterable<Tuple4<Long, Long, Long, Long>> best, Collector<String> out) {
                                Tuple4<Long, Long, Long, Long> b = best.iterator().next();
                                out.collect(c.window().getStart() + "," + b.f0 + "," + b.f1 + "," + b.f2 + "," + b.f3);
                            }
                        });
            }
            case "q8" -> {
                // Persons (id, name, 1) and auctions (seller, "", 0) in one stream, per id and tumbling
                // window: kept when both kinds are there.
                DataStream<Tuple3<Long, String, Integer>> both = source(env, bootstrap, in, groupId, lateMs,
                        new Parse<Tuple3<Long, String, Integer>>(Types.TUPLE(Types.LONG, Types.STRING, Types.INT)) {
                            Tuple3<Long, String, Integer> pick(Nexmark.Event e) {
                                if (e.person != null) return Tuple3.of(e.person.id, e.person.name, 1);
                                if (e.auction != null) return Tuple3.of(e.auction.seller, "", 0);
                                return null;
                            }
                        });
                return both.keyBy(t -> t.f0, Types.LONG)
                        .window(TumblingEventTimeWindows.of(Duration.ofMillis(Queries.Q8_SIZE_MS)))
                        .aggregate(new AggregateFunction<Tuple3<Long, String, Integer>, Tuple3<Boolean, Boolean, String>,
                                Tuple3<Boolean, Boolean, String>>() {
                            public Tuple3<Boolean, Boolean, String> createAccumulator() { return Tuple3.of(false, false, ""); }

                            public Tuple3<Boolean, Boolean, String> add(Tuple3<Long, String, Integer> v, Tuple3<Boolean, Boolean, String> acc) {
                                return v.f2 == 1 ? Tuple3.of(true, acc.f1, v.f1) : Tuple3.of(acc.f0, true, acc.f2);
                            }

                            public Tuple3<Boolean, Boolean, String> getResult(Tuple3<Boolean, Boolean, String> acc) { return acc; }

                            public Tuple3<Boolean, Boolean, String> merge(Tuple3<Boolean, Boolean, String> x, Tuple3<Boolean, Boolean, String> y) {
                                return Tuple3.of(x.f0 || y.f0, x.f1 || y.f1, x.f0 ? x.f2 : y.f2);
                            }
                        }, new ProcessWindowFunction<Tuple3<Boolean, Boolean, String>, String, Long, TimeWindow>() {
                            public void process(Long id, Context c, Iterable<Tuple3<Boolean, Boolean, String>> r, Collector<String> out) {
                                Tuple3<Boolean, Boolean, String> acc = r.iterator().next();
                                if (acc.f0 && acc.f1) out.collect(c.window().getStart() + "," + id + "," + acc.f2);
                            }
                        });
            }
            case "q11" -> {
                DataStream<Long> bidders = source(env, bootstrap, in, groupId, lateMs, new Parse<Long>(Types.LONG) {
                    Long pick(Nexmark.Event e) { return e.bid == null ? null : e.bid.bidder; }
                });
                return bidders.keyBy(x -> x, Types.LONG)
                        .window(EventTimeSessionWindows.withGap(Duration.ofMillis(Queries.Q11_GAP_MS)))
                        .aggregate(new Count<>(), new ProcessWindowFunction<Long, String, Long, TimeWindow>() {
                            public void process(Long bidder, Context c, Iterable<Long> n, Collector<String> out) {
                                // Flink's session end is the last bid + gap, as the canonical row has it.
                                out.collect(bidder + "," + c.window().getStart() + "," + c.window().getEnd() + "," + n.iterator().next());
                            }
                        });
            }
            default -> throw new IllegalArgumentException("unknown query " + q);
        }
    }

    static <T> DataStream<T> source(StreamExecutionEnvironment env, String bootstrap, String in, String groupId, long lateMs,
                                    Parse<T> parse) {
        KafkaSource<T> src = KafkaSource.<T>builder().setBootstrapServers(bootstrap).setTopics(in).setGroupId(groupId)
                .setStartingOffsets(OffsetsInitializer.earliest()).setDeserializer(parse).build();
        return env.fromSource(src, WatermarkStrategy.<T>forBoundedOutOfOrderness(Duration.ofMillis(lateMs)), "nexmark");
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = args(argv);
        StreamExecutionEnvironment env = environment(a);
        DataStream<String> rows = query(env, a.get("query"), a.get("bootstrap"), a.get("input"),
                Long.parseLong(a.get("lateness-ms")), "flink-" + a.get("output"));
        serve(a, env, rows, "DataStream API", "", -1);
    }

    /** The local MiniCluster of --parallelism slots, checkpointing as --checkpoint-ms says. */
    static StreamExecutionEnvironment environment(Map<String, String> a) {
        int parallelism = Integer.parseInt(a.getOrDefault("parallelism", "2"));
        long checkpointMs = Long.parseLong(a.getOrDefault("checkpoint-ms", "0"));
        Configuration conf = new Configuration();
        if (checkpointMs > 0) {
            conf.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
            conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, Path.of(a.get("checkpoint-dir")).toUri().toString());
        }
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(parallelism, conf);
        if (checkpointMs > 0) env.enableCheckpointing(checkpointMs);
        return env;
    }

    /**
     * Writes the query's rows to the output topic, prints the config, starts the job and reports it
     * (started, running), then waits for "stop" on stdin and reports how it ended. {@code startMs} is
     * the drain clock's start (-1: at the job's submission, as for the DataStream API; SQL's is before its
     * planner optimizes the query, as Spark's planning is inside its drain).
     */
    static void serve(Map<String, String> a, StreamExecutionEnvironment env, DataStream<String> rows, String api,
                      String apiSettings, long startMs) throws Exception {
        String q = a.get("query");
        long checkpointMs = Long.parseLong(a.getOrDefault("checkpoint-ms", "0"));
        rows.sinkTo(KafkaSink.<String>builder().setBootstrapServers(a.get("bootstrap"))
                .setRecordSerializer(KafkaRecordSerializationSchema.builder().setTopic(a.get("output"))
                        .setValueSerializationSchema(new SimpleStringSchema()).build())
                .setDeliveryGuarantee(checkpointMs > 0 ? DeliveryGuarantee.AT_LEAST_ONCE : DeliveryGuarantee.NONE)
                .build()).name("kafka-out");
        Configuration effective = new Configuration(env.getConfiguration() instanceof Configuration c ? c : new Configuration());
        System.out.println("{\"event\": \"config\", \"flink\": {\"query\": \"" + q + "\", \"api\": \"" + api + "\", \"version\": \""
                + org.apache.flink.runtime.util.EnvironmentInformation.getVersion() + "\", \"parallelism\": " + env.getParallelism()
                + ", \"state backend\": \"" + effective.get(StateBackendOptions.STATE_BACKEND) + " (default)\""
                + ", \"checkpointing\": \"" + (checkpointMs > 0 ? "every " + checkpointMs + " ms, filesystem storage on local disk, at-least-once sink"
                : "off, sink without delivery guarantee") + "\""
                + ", \"watermark\": \"bounded out-of-orderness " + a.get("lateness-ms") + " ms, every "
                + effective.get(PipelineOptions.AUTO_WATERMARK_INTERVAL).toMillis() + " ms\""
                + ", \"object reuse\": " + env.getConfig().isObjectReuseEnabled() + apiSettings + "}}");
        long start = startMs >= 0 ? startMs : System.currentTimeMillis();
        JobClient job = env.executeAsync("peers-" + q);
        System.out.println("{\"event\": \"started\", \"start_ms\": " + start + "}");
        System.out.flush();
        Thread waiter = new Thread(() -> {
            try {
                while (job.getJobStatus().get() != JobStatus.RUNNING) Thread.sleep(20);
                System.out.println("{\"event\": \"running\", \"running_ms\": " + System.currentTimeMillis() + "}");
                System.out.flush();
            } catch (Exception e) {
                e.printStackTrace();
            }
        });
        waiter.setDaemon(true);
        waiter.start();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (String line; (line = in.readLine()) != null; ) if (line.trim().equals("stop")) break;
        String status = job.getJobStatus().get().toString();
        String failure = null;
        if (status.equals("FAILED")) {
            try { job.getJobExecutionResult().get(); } catch (Exception e) { failure = String.valueOf(e.getCause()); }
        }
        try { job.cancel().get(); } catch (Exception ignored) { }
        System.out.println("{\"event\": \"stopped\", \"vm_hwm_kb\": " + vmHwmKb() + ", \"state\": \"" + status + "\""
                + (failure == null ? "" : ", \"failure\": \"" + failure.replace("\"", "'").replace("\n", " ") + "\"") + "}");
        System.out.flush();
        System.exit(0);
    }

    static Map<String, String> args(String[] argv) {
        Map<String, String> m = new HashMap<>();
        for (int i = 0; i < argv.length; i += 2) m.put(argv[i].substring(2), argv[i + 1]);
        return m;
    }

    static long vmHwmKb() throws IOException {
        for (String l : Files.readAllLines(Path.of("/proc/self/status")))
            if (l.startsWith("VmHWM:")) return Long.parseLong(l.replaceAll("[^0-9]", ""));
        return -1;
    }
}
