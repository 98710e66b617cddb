// Runs kafka-clients' own assignors (RangeAssignor, RoundRobinAssignor, CooperativeStickyAssignor) on the cases
// read from stdin and prints each result as one JSON line, for integration_tests/test_assignors_vs_java.py.
//
// Input, one item per line:
//   case NAME ASSIGNOR
//   topic NAME PARTITIONS
//   member ID GENERATION TOPIC[,TOPIC...] [TOPIC:PARTITION,...]   (owned partitions; "-" for none)
//   end
// Output: {"case":"NAME","assignment":{"ID":["TOPIC-PARTITION",...],...}}

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;

import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.GroupSubscription;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.RoundRobinAssignor;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;

public class AssignorCases {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String name = null, assignorName = null;
        Map<String, Integer> topics = new TreeMap<>();
        List<String[]> members = new ArrayList<>();
        for (String line; (line = in.readLine()) != null; ) {
            String[] f = line.trim().split(" ");
            switch (f[0]) {
                case "case": name = f[1]; assignorName = f[2]; topics.clear(); members.clear(); break;
                case "topic": topics.put(f[1], Integer.parseInt(f[2])); break;
                case "member": members.add(f); break;
                case "end": System.out.println(run(name, assignorName, topics, members)); break;
                default: break;
            }
        }
    }

    static String run(String name, String assignorName, Map<String, Integer> topics, List<String[]> members) {
        ConsumerPartitionAssignor assignor;
        switch (assignorName) {
            case "range": assignor = new RangeAssignor(); break;
            case "roundrobin": assignor = new RoundRobinAssignor(); break;
            default: assignor = new CooperativeStickyAssignor(); break;
        }
        Node node = new Node(0, "localhost", 9092);
        List<PartitionInfo> partitions = new ArrayList<>();
        topics.forEach((t, n) -> {
            for (int p = 0; p < n; p++)
                partitions.add(new PartitionInfo(t, p, node, new Node[]{node}, new Node[]{node}));
        });
        Cluster cluster = new Cluster("c", Collections.singletonList(node), partitions,
                                      Collections.emptySet(), Collections.emptySet());
        Map<String, Subscription> subscriptions = new HashMap<>();
        for (String[] m : members) {
            int generation = Integer.parseInt(m[2]);
            List<TopicPartition> owned = new ArrayList<>();
            if (m.length > 4 && !m[4].equals("-")) {
                for (String tp : m[4].split(",")) {
                    int colon = tp.lastIndexOf(':');
                    owned.add(new TopicPartition(tp.substring(0, colon), Integer.parseInt(tp.substring(colon + 1))));
                }
            }
            // what a cooperative-sticky member sends: its generation in the user data and the GenerationId field
            ByteBuffer userData = ByteBuffer.allocate(4).putInt(0, generation);
            subscriptions.put(m[1], new Subscription(Arrays.asList(m[3].split(",")), userData, owned, generation,
                                                     Optional.empty()));
        }
        Map<String, ConsumerPartitionAssignor.Assignment> result =
            assignor.assign(cluster, new GroupSubscription(subscriptions)).groupAssignment();
        StringBuilder out = new StringBuilder("{\"case\":\"" + name + "\",\"assignment\":{");
        boolean first = true;
        for (Map.Entry<String, ConsumerPartitionAssignor.Assignment> e : new TreeMap<>(result).entrySet()) {
            List<String> names = new ArrayList<>();
            for (TopicPartition tp : e.getValue().partitions())
                names.add("\"" + tp.topic() + "-" + tp.partition() + "\"");
            Collections.sort(names);
            out.append(first ? "" : ",").append("\"").append(e.getKey()).append("\":[")
               .append(String.join(",", names)).append("]");
            first = false;
        }
        return out.append("}}").toString();
    }
}
