// Kafka's own producer and consumer against a broker, in one JVM (Java's single-file source launcher):
//   java -cp "kafka-clients/*" ClientRoundTrip.java BOOTSTRAP TOPIC GROUP COUNT [PROPERTY=VALUE ...]
// The producer keeps its defaults (acks=all; enable.idempotence=true since 3.0) and sends COUNT keyed records;
// then a consumer of GROUP subscribes, polls until it has COUNT records (or 60 s pass) and commits synchronously.
// Output, one JSON object a line: {"acked":...} per record, {"producer":{...}} once, {"read":...} per record,
// {"committed":{...}} once. Extra PROPERTY=VALUE pairs (e.g. SASL settings) go to both clients; with a
// transactional.id the producer first calls initTransactions(), sends COUNT records "x<i>" in a transaction it
// aborts ({"aborted":COUNT}), then the COUNT records in one it commits (pass isolation.level=read_committed
// for a consumer that must skip the aborted ones).
import java.time.Duration;
import java.util.*;
import java.util.concurrent.Future;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ClientRoundTrip {
    static String q(String s) {
        return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    // Java 17's source launcher mangles the stack trace of an exception leaving main (it prints
    // "IllegalArgumentException: 0 > -7" instead), so the failure is printed here: {"error":"Class: message"}.
    public static void main(String[] args) {
        try {
            run(args);
        } catch (Exception e) {
            Throwable cause = e instanceof java.util.concurrent.ExecutionException && e.getCause() != null
                    ? e.getCause() : e;
            System.out.println("{\"error\":" + q(cause.getClass().getName() + ": " + cause.getMessage()) + "}");
            e.printStackTrace();
            System.exit(1);
        }
    }

    static void run(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        int count = Integer.parseInt(args[3]);
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        for (int i = 4; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            common.put(kv[0], kv[1]);
        }

        Properties p = new Properties();
        p.putAll(common);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            boolean transactional = p.containsKey("transactional.id");
            if (transactional) {
                producer.initTransactions();
                producer.beginTransaction();
                for (int i = 0; i < count; i++) producer.send(new ProducerRecord<>(topic, "k" + i, "x" + i));
                producer.flush();
                producer.abortTransaction();
                System.out.println("{\"aborted\":" + count + "}");
                producer.beginTransaction();
            }
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, "k" + i, "v" + i)));
            }
            for (int i = 0; i < count; i++) {
                RecordMetadata m = sent.get(i).get();
                System.out.println("{\"acked\":{\"key\":" + q("k" + i) + ",\"partition\":" + m.partition()
                        + ",\"offset\":" + m.offset() + "}}");
            }
            if (transactional) producer.commitTransaction();
            // the defaults the run used, as the producer resolved them (not as this program assumes them)
            ProducerConfig config = new ProducerConfig(p);
            System.out.println("{\"producer\":{\"acks\":" + q(config.getString("acks"))
                    + ",\"enable.idempotence\":" + config.getBoolean("enable.idempotence") + "}}");
        }

        Properties c = new Properties();
        c.putAll(common);
        c.put("group.id", group);
        c.put("auto.offset.reset", "earliest");
        c.put("enable.auto.commit", "false");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            consumer.subscribe(List.of(topic));
            int read = 0;
            long deadline = System.currentTimeMillis() + 60_000;
            while (read < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    read++;
                    System.out.println("{\"read\":{\"key\":" + q(r.key()) + ",\"value\":" + q(r.value())
                            + ",\"partition\":" + r.partition() + ",\"offset\":" + r.offset() + "}}");
                }
            }
            consumer.commitSync();
            StringBuilder committed = new StringBuilder();
            Set<TopicPartition> assigned = consumer.assignment();
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : consumer.committed(assigned).entrySet()) {
                if (committed.length() > 0) committed.append(",");
                long offset = e.getValue() == null ? -1 : e.getValue().offset();
                committed.append(q(Integer.toString(e.getKey().partition()))).append(":").append(offset);
            }
            System.out.println("{\"committed\":{" + committed + "}}");
        }
    }
}
