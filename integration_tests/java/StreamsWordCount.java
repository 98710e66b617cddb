import java.time.Duration;
import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Kafka Streams' word count with processing.guarantee=exactly_once_v2: the words of each line of INPUT (split on
 * spaces) regrouped by word through a repartition topic, counted in a RocksDB store with a compacted changelog
 * topic, and each new count written to OUTPUT (key: the word, value: the count as a decimal string). SLEEP_MS per
 * line slows it down so that a kill lands while transactions are open. Prints "state RUNNING" etc. as the
 * application changes state; runs until killed.
 *
 * Usage: java -cp "kafka-streams-3.9.x/*" StreamsWordCount.java BOOTSTRAP APP_ID STATE_DIR INPUT OUTPUT SLEEP_MS
 */
public class StreamsWordCount {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String input = args[3];
        String output = args[4];
        long sleepMs = Long.parseLong(args[5]);
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[2]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);  // one broker
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        props.put(StreamsConfig.producerPrefix("transaction.timeout.ms"), 10000);

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            .peek((key, line) -> pause(sleepMs))
            .flatMap((key, line) -> Arrays.stream(line.toLowerCase(Locale.ROOT).split(" "))
                .filter(word -> !word.isEmpty()).map(word -> KeyValue.pair(word, word)).toList())
            .groupByKey(Grouped.with("words", Serdes.String(), Serdes.String()))
            .count(Materialized.as("counts"))
            .toStream()
            .mapValues(count -> Long.toString(count))
            .to(output, Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.setStateListener((now, before) -> {
            System.out.println("state " + now);
            System.out.flush();
        });
        streams.setUncaughtExceptionHandler(error -> {
            System.err.println("stream thread failed: " + error);
            error.printStackTrace();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse
                .SHUTDOWN_APPLICATION;
        });
        CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(10));
            done.countDown();
        }));
        streams.start();
        done.await();
    }

    private static void pause(long ms) {
        if (ms <= 0) {
            return;
        }
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
