/*
 * A member of a Kafka 0.8-style ZooKeeper consumer group run by Kafka's own old Scala consumer
 * (kafka.consumer.ZookeeperConsumerConnector, through its Java API; removed from Kafka in 2.0, so run it from
 * Kafka 1.1.1's jars). integration_tests/test_mixed_scala_group.py runs it beside metaq members.
 *
 *   java -cp "<kafka 1.1.1 jars>/*" OldConsumer.java <zookeeper.connect> <group> <topic> <consumer.id> \
 *       <range|roundrobin> [max-messages] [key=value ...]
 *
 * Prints JSON lines on stdout, flushed one by one:
 *   {"event":"assigned","consumer_id":C,"time":T,"assignment":{"<partition>":"<thread id>",...}}   (the whole group's
 *      assignment as this member computed it, from beforeStartingFetchers)
 *   {"event":"released","consumer_id":C,"time":T}
 *   {"event":"record","partition":P,"offset":O,"key":K,"value":V,"timestamp":TS,"timestamp_type":TT,"time":T}
 *      (K null for a null key; TS and TT as the message carries them: -1 and "NoTimestampType" for magic 0,
 *      "CreateTime" or "LogAppendTime" for magic 1)
 *   {"event":"idle","consumer_id":C,"time":T}    (max-messages reached: stops iterating, keeps its partitions)
 * T is System.nanoTime()/1e9, the same CLOCK_MONOTONIC as Python's time.monotonic(). SIGTERM shuts the connector
 * down (which commits, auto-commit being on); SIGKILL is a crash.
 */

import java.nio.charset.StandardCharsets;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;

import kafka.consumer.Consumer;
import kafka.consumer.ConsumerConfig;
import kafka.consumer.ConsumerIterator;
import kafka.consumer.ConsumerThreadId;
import kafka.consumer.KafkaStream;
import kafka.javaapi.consumer.ConsumerConnector;
import kafka.javaapi.consumer.ConsumerRebalanceListener;
import kafka.message.MessageAndMetadata;

public final class OldConsumer {
    private static synchronized void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    private static String now() {
        return String.format("%.6f", System.nanoTime() / 1e9);
    }

    private static String quote(String s) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }

    public static void main(String[] args) throws Exception {
        String zk = args[0], group = args[1], topic = args[2], id = args[3], strategy = args[4];
        long maxMessages = args.length > 5 ? Long.parseLong(args[5]) : -1;
        Properties props = new Properties();
        props.put("zookeeper.connect", zk);
        props.put("group.id", group);
        props.put("consumer.id", id);  // the connector's id is then <group>_<consumer.id>
        props.put("partition.assignment.strategy", strategy);
        props.put("auto.offset.reset", "smallest");
        props.put("auto.commit.interval.ms", "200");
        props.put("zookeeper.session.timeout.ms", "6000");
        props.put("rebalance.backoff.ms", "500");
        props.put("rebalance.max.retries", "60");  // concurrent rebalances on a loaded 2-core machine
        for (int i = 6; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            props.put(kv[0], kv[1]);
        }
        String consumerId = group + "_" + id;
        ConsumerConnector connector = Consumer.createJavaConsumerConnector(new ConsumerConfig(props));
        connector.setConsumerRebalanceListener(new ConsumerRebalanceListener() {
            @Override
            public void beforeReleasingPartitions(Map<String, Set<Integer>> ownership) {
                // the argument's value type is wrong in Kafka (KAFKA-2284): not read
                emit("{\"event\":\"released\",\"consumer_id\":" + quote(consumerId) + ",\"time\":" + now() + "}");
            }

            @Override
            public void beforeStartingFetchers(String cid, Map<String, Map<Integer, ConsumerThreadId>> global) {
                StringBuilder parts = new StringBuilder();
                Map<Integer, ConsumerThreadId> mine = global.getOrDefault(topic, Collections.emptyMap());
                for (Map.Entry<Integer, ConsumerThreadId> e : new TreeMap<>(mine).entrySet()) {
                    if (parts.length() > 0) {
                        parts.append(',');
                    }
                    parts.append(quote(String.valueOf(e.getKey()))).append(':').append(quote(e.getValue().toString()));
                }
                emit("{\"event\":\"assigned\",\"consumer_id\":" + quote(cid) + ",\"time\":" + now()
                     + ",\"assignment\":{" + parts + "}}");
            }
        });
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            connector.shutdown();  // commits (auto-commit is on), then deletes our ids and owner nodes
            stopped.countDown();
        }, "old-consumer-shutdown"));
        Map<String, List<KafkaStream<byte[], byte[]>>> streams =
            connector.createMessageStreams(Collections.singletonMap(topic, 1));
        ConsumerIterator<byte[], byte[]> it = streams.get(topic).get(0).iterator();
        long count = 0;
        while ((maxMessages < 0 || count < maxMessages) && it.hasNext()) {
            MessageAndMetadata<byte[], byte[]> m = it.next();
            count++;
            String value = m.message() == null ? "" : new String(m.message(), StandardCharsets.UTF_8);
            String key = m.key() == null ? "null" : quote(new String(m.key(), StandardCharsets.UTF_8));
            emit("{\"event\":\"record\",\"partition\":" + m.partition() + ",\"offset\":" + m.offset()
                 + ",\"key\":" + key + ",\"value\":" + quote(value) + ",\"timestamp\":" + m.timestamp()
                 + ",\"timestamp_type\":" + quote(m.timestampType().toString()) + ",\"time\":" + now() + "}");
        }
        if (maxMessages >= 0 && count >= maxMessages) {
            emit("{\"event\":\"idle\",\"consumer_id\":" + quote(consumerId) + ",\"time\":" + now() + "}");
            stopped.await();  // keep the partitions (and the committed offsets) until SIGTERM
        }
    }
}
