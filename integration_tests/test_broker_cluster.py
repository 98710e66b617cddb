"""Two brokers on loopback: partitions spread over both, and each answers only for what it leads."""

from __future__ import annotations

import confluent_kafka

from integration_tests import peers
from metaq.testing.broker import fetch_error, topic_leaders


def test_six_partitions_spread_over_two_brokers(broker_cluster, make_topic) -> None:
    b0 = broker_cluster.add(0)
    b1 = broker_cluster.add(1)
    topic = make_topic("spread", partitions=6)
    leaders = topic_leaders(b0.bootstrap, topic)
    assert topic_leaders(b1.bootstrap, topic) == leaders
    assert sorted(leaders) == list(range(6))
    assert sorted(leaders.values()) == [0, 0, 0, 1, 1, 1]
    by_id = {0: b0, 1: b1}
    for partition, leader in leaders.items():
        other = by_id[1 - leader]
        assert fetch_error(by_id[leader].bootstrap, topic, partition) == 0
        assert fetch_error(other.bootstrap, topic, partition) == 6  # NOT_LEADER_OR_FOLLOWER
    assert fetch_error(b0.bootstrap, "no-such-topic", 0) == 3  # UNKNOWN_TOPIC_OR_PARTITION

    # a standard client bootstrapped from one broker finds every leader and round-trips
    for partition in range(6):
        items = [(b"k", b"p%d-%d" % (partition, i), 1_700_000_000_000 + i) for i in range(5)]
        acked = peers.confluent_produce(b1.bootstrap, topic, partition, items)
        assert [m.offset for m in acked] == list(range(5))
        got = peers.confluent_consume(b1.bootstrap, topic, partition, confluent_kafka.OFFSET_BEGINNING, 5)
        assert got == acked
