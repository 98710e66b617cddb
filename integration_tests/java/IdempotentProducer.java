import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Java's KafkaProducer with its defaults (idempotence on, acks=all, retries until delivery.timeout.ms) sending
 * COUNT records, the value of record i being i as 8 digits, to partition i % PARTITIONS, paced so that the sends
 * span a broker kill the test does meanwhile. Prints "acked N" every 500 acknowledgements, then writes one line
 * "partition offset value" per acknowledged record to OUT; exit status 1 if any send failed.
 *
 * Usage: java -cp "kafka-clients-3.9.x/*" IdempotentProducer.java BOOTSTRAP TOPIC PARTITIONS COUNT OUT
 */
public class IdempotentProducer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        int count = Integer.parseInt(args[3]);
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        props.put("linger.ms", "5");
        props.put("delivery.timeout.ms", "180000");
        props.put("request.timeout.ms", "10000");
        props.put("reconnect.backoff.max.ms", "500");
        List<String> acked = Collections.synchronizedList(new ArrayList<>());
        AtomicInteger errors = new AtomicInteger();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            for (int i = 0; i < count; i++) {
                String value = String.format("%08d", i);
                producer.send(new ProducerRecord<>(topic, i % partitions, null, value.getBytes(StandardCharsets.UTF_8)),
                    (metadata, error) -> {
                        if (error != null) {
                            errors.incrementAndGet();
                            System.err.println("send failed: " + error);
                            return;
                        }
                        acked.add(metadata.partition() + " " + metadata.offset() + " " + value);
                        if (acked.size() % 500 == 0) {
                            System.out.println("acked " + acked.size());
                            System.out.flush();
                        }
                    });
                if (i % 100 == 0) {
                    Thread.sleep(20);
                }
            }
            producer.flush();
        }
        Files.write(Paths.get(args[4]), acked);
        System.out.println("done " + acked.size() + " acknowledged, " + errors.get() + " failed");
        System.exit(errors.get() == 0 ? 0 : 1);
    }
}
