import java.lang.management.ManagementFactory;
import java.util.Set;
import java.util.TreeSet;

import javax.management.MBeanServer;
import javax.management.ObjectName;

/**
 * The Spark sides' Kafka sink producers, from their JMX metrics (local mode: the producers live in the
 * driver's JVM), as one JSON object per client id. Called from spark_side.py through py4j, which cannot
 * call the platform MBean server's methods itself (its class is in a module Java 17 does not open).
 */
public final class ProducerMetrics {
    private static final String[] METRICS = {
        "record-queue-time-avg", "record-queue-time-max", "request-latency-avg", "request-latency-max",
        "records-per-request-avg", "batch-size-avg", "record-send-total", "request-total",
        "produce-throttle-time-avg", "io-wait-ratio", "select-total", "metadata-wait-time-ns-total",
        "bufferpool-wait-time-ns-total", "flush-time-ns-total"};

    private ProducerMetrics() {}

    public static String json() throws Exception {
        MBeanServer server = ManagementFactory.getPlatformMBeanServer();
        Set<ObjectName> names = new TreeSet<>(server.queryNames(new ObjectName("kafka.producer:type=producer-metrics,*"), null));
        StringBuilder out = new StringBuilder("{");
        for (ObjectName name : names) {
            if (out.length() > 1) out.append(',');
            out.append('"').append(name.getKeyProperty("client-id")).append("\":{");
            boolean first = true;
            for (String m : METRICS) {
                Object v;
                try {
                    v = server.getAttribute(name, m);
                } catch (Exception absent) {  // a metric this client version does not have
                    continue;
                }
                if (!first) out.append(',');
                first = false;
                out.append('"').append(m).append("\":").append(v instanceof Double d && (d.isNaN() || d.isInfinite()) ? "null" : v);
            }
            out.append('}');
        }
        return out.append('}').toString();
    }
}
