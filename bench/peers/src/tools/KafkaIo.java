// What every tool and the Kafka Streams side of bench/peers share: the command line, topics, the
// producer and consumer settings, partitioning, and the process's peak RSS.
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.TopicConfig;
import org.apache.kafka.common.serialization.*;
import org.apache.kafka.common.utils.Utils;

public final class KafkaIo {
    /** `--key value` pairs (a `--flag` without a value is "true"). */
    public static Map<String, String> args(String[] argv) {
        Map<String, String> m = new HashMap<>();
        for (int i = 0; i < argv.length; i++) {
            if (!argv[i].startsWith("--")) throw new IllegalArgumentException("expected --key, got " + argv[i]);
            String k = argv[i].substring(2);
            if (i + 1 < argv.length && !argv[i + 1].startsWith("--")) m.put(k, argv[++i]);
            else m.put(k, "true");
        }
        return m;
    }

    public static String req(Map<String, String> a, String k) {
        String v = a.get(k);
        if (v == null) throw new IllegalArgumentException("missing --" + k);
        return v;
    }

    static void createTopic(Map<String, String> a) throws Exception {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, req(a, "bootstrap"));
        try (Admin admin = Admin.create(p)) {
            NewTopic t = new NewTopic(req(a, "topic"), Integer.parseInt(req(a, "partitions")), (short) 1);
            // The backlogs' event times lie in the past (a fixed start, for the same contents from the
            // same seed): without this the broker's time retention (7 days) deletes them at once.
            Map<String, String> configs = new HashMap<>(Map.of(TopicConfig.RETENTION_MS_CONFIG, "-1"));
            if (a.containsKey("log-append-time"))
                configs.put(TopicConfig.MESSAGE_TIMESTAMP_TYPE_CONFIG, "LogAppendTime");
            t.configs(configs);
            admin.createTopics(List.of(t)).all().get();
        }
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

    static KafkaProducer<String, String> producer(String bootstrap) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, String.valueOf(256 << 10));
        p.put(ProducerConfig.BUFFER_MEMORY_CONFIG, String.valueOf(64 << 20));
        p.put(ProducerConfig.ACKS_CONFIG, "1");
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

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

    public static long vmHwmKb() throws IOException {
        for (String l : Files.readAllLines(Path.of("/proc/self/status")))
            if (l.startsWith("VmHWM:")) return Long.parseLong(l.replaceAll("[^0-9]", ""));
        return -1;
    }

    /** The q-quantile of a sorted array (nearest rank). */
    static long pct(long[] sorted, double q) {
        return sorted[(int) Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)];
    }
}
