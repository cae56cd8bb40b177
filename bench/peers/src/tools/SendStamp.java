import java.nio.charset.StandardCharsets;
import java.util.Map;

import org.apache.kafka.clients.producer.ProducerInterceptor;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;

/**
 * A producer interceptor for the Spark sides' Kafka sink (`--stamp-emit`): writes the wall clock at
 * which Spark's writer handed each record to the producer into the header `send-ms`, so that the
 * collector splits a result's way from suppress to the broker into Spark's write path (emit to send)
 * and the producer's (send to the broker's append).
 */
public final class SendStamp implements ProducerInterceptor<byte[], byte[]> {
    public static final String HEADER = "send-ms";

    @Override
    public ProducerRecord<byte[], byte[]> onSend(ProducerRecord<byte[], byte[]> r) {
        r.headers().add(HEADER, Long.toString(System.currentTimeMillis()).getBytes(StandardCharsets.UTF_8));
        return r;
    }

    @Override
    public void onAcknowledgement(RecordMetadata metadata, Exception exception) {}

    @Override
    public void close() {}

    @Override
    public void configure(Map<String, ?> configs) {}
}
