// Kafka's AdminClient against a broker, one operation after the other in one JVM:
//   java -cp "kafka-clients/*" AdminOps.java BOOTSTRAP TOPIC GROUP ACL_TOPIC
// Output, one JSON object a line per operation: {"op":NAME,"result":...} or {"op":NAME,"error":"Class: message"}
// (an operation that fails does not stop the next ones). TOPIC must not exist yet; GROUP gets its offsets from
// alterConsumerGroupOffsets (no member joins); ACL_TOPIC is only named by the ACL created.
import java.util.*;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.resource.*;
import org.apache.kafka.common.serialization.StringSerializer;

public class AdminOps {
    interface Op { String call() throws Exception; }

    static String q(Object s) {
        return s == null ? "null" : "\"" + s.toString().replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static void op(String name, Op body) {
        try {
            System.out.println("{\"op\":" + q(name) + ",\"result\":" + body.call() + "}");
        } catch (Exception e) {
            Throwable cause = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
            System.out.println("{\"op\":" + q(name) + ",\"error\":" + q(cause.getClass().getSimpleName() + ": "
                    + cause.getMessage()) + "}");
        }
    }

    static String offsets(Map<TopicPartition, OffsetAndMetadata> offsets) {
        StringJoiner out = new StringJoiner(",", "{", "}");
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
            out.add(q(e.getKey().partition()) + ":" + (e.getValue() == null ? -1 : e.getValue().offset()));
        }
        return out.toString();
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2], aclTopic = args[3];
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        ConfigResource topicResource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        TopicPartition p0 = new TopicPartition(topic, 0), p1 = new TopicPartition(topic, 1);
        try (Admin admin = Admin.create(props)) {
            op("createTopics", () -> {
                NewTopic t = new NewTopic(topic, 3, (short) 1).configs(Map.of("retention.ms", "3600000"));
                admin.createTopics(List.of(t)).all().get();
                return "true";
            });
            op("describeTopics", () -> {
                TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
                return "{\"partitions\":" + d.partitions().size() + ",\"leader\":"
                        + d.partitions().get(0).leader().id() + "}";
            });
            op("describeConfigs", () -> q(admin.describeConfigs(List.of(topicResource)).all().get()
                    .get(topicResource).get("retention.ms").value()));
            op("incrementalAlterConfigs", () -> {
                AlterConfigOp set = new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"),
                        AlterConfigOp.OpType.SET);
                admin.incrementalAlterConfigs(Map.of(topicResource, List.of(set))).all().get();
                return q(admin.describeConfigs(List.of(topicResource)).all().get()
                        .get(topicResource).get("retention.ms").value());
            });
            op("produce", () -> {
                Properties p = new Properties();
                p.putAll(props);
                p.put("key.serializer", StringSerializer.class.getName());
                p.put("value.serializer", StringSerializer.class.getName());
                try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
                    for (int i = 0; i < 5; i++) producer.send(new ProducerRecord<>(topic, 0, "k" + i, "v" + i));
                    producer.flush();
                }
                return "5";
            });
            op("alterConsumerGroupOffsets", () -> {
                admin.alterConsumerGroupOffsets(group, Map.of(p0, new OffsetAndMetadata(3),
                        p1, new OffsetAndMetadata(0))).all().get();
                return "true";
            });
            op("listConsumerGroups", () -> {
                StringJoiner out = new StringJoiner(",", "[", "]");
                for (ConsumerGroupListing g : admin.listConsumerGroups().all().get()) out.add(q(g.groupId()));
                return out.toString();
            });
            op("describeConsumerGroups", () -> {
                ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
                return "{\"state\":" + q(d.state()) + ",\"members\":" + d.members().size() + ",\"coordinator\":"
                        + d.coordinator().id() + "}";
            });
            op("listConsumerGroupOffsets", () ->
                    offsets(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get()));
            op("deleteConsumerGroupOffsets", () -> {
                admin.deleteConsumerGroupOffsets(group, Set.of(p0)).all().get();
                return offsets(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get());
            });
            op("deleteRecords", () -> {
                DeletedRecords deleted = admin.deleteRecords(Map.of(p0, RecordsToDelete.beforeOffset(2)))
                        .lowWatermarks().get(p0).get();
                return Long.toString(deleted.lowWatermark());
            });
            op("createAcls", () -> {
                AclBinding binding = new AclBinding(
                        new ResourcePattern(ResourceType.TOPIC, aclTopic, PatternType.LITERAL),
                        new AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW));
                admin.createAcls(List.of(binding)).all().get();
                return "true";
            });
            op("describeAcls", () -> {
                AclBindingFilter filter = new AclBindingFilter(
                        new ResourcePatternFilter(ResourceType.TOPIC, aclTopic, PatternType.LITERAL),
                        AccessControlEntryFilter.ANY);
                StringJoiner out = new StringJoiner(",", "[", "]");
                for (AclBinding b : admin.describeAcls(filter).values().get()) {
                    out.add("{\"principal\":" + q(b.entry().principal()) + ",\"operation\":"
                            + q(b.entry().operation()) + ",\"permission\":" + q(b.entry().permissionType()) + "}");
                }
                return out.toString();
            });
            op("describeCluster", () -> {
                DescribeClusterResult c = admin.describeCluster();
                StringJoiner nodes = new StringJoiner(",", "[", "]");
                for (Node n : c.nodes().get()) nodes.add(Integer.toString(n.id()));
                return "{\"clusterId\":" + q(c.clusterId().get()) + ",\"controller\":" + c.controller().get().id()
                        + ",\"nodes\":" + nodes + "}";
            });
        }
    }
}
