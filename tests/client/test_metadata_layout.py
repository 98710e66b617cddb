"""MetadataLayout: the ZkLayout reads answered from one Metadata answer, and where it asks (no network here)."""

from __future__ import annotations

from types import SimpleNamespace as NS
from typing import Any

import pytest

from metaq.admin.broker_topics import BrokerTopics
from metaq.client.metadata import MetadataLayout, MetadataSnapshot, parse_metadata
from metaq.client.settings import ConnectionSettings
from metaq.consumer.config import ConsumerConfig
from metaq.consumer.group_protocol import metadata_changes
from metaq.errors import ConfigError, InternalTopicError

ANSWER = NS(controller_id=2, brokers=[NS(node_id=1, host="b1", port=9092), NS(node_id=2, host="b2", port=9093)],
            topics=[NS(error_code=0, name="clicks", partitions=[
                NS(partition_index=1, leader_id=2, leader_epoch=4, replica_nodes=[2, 1], isr_nodes=[2]),
                NS(partition_index=0, leader_id=1, leader_epoch=0, replica_nodes=[1], isr_nodes=[1])])])


class _Answered(MetadataLayout):
    """Answers from ANSWER, counting the requests it would have sent."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("seed:9092", ConnectionSettings(), **kwargs)
        self.asked = 0

    def _ask(self) -> MetadataSnapshot:
        self.asked += 1
        return parse_metadata(ANSWER, "PLAINTEXT")


def test_zk_layout_reads_from_one_answer() -> None:
    layout = _Answered(min_refresh_s=60)
    assert layout.topic_partition_ids(["clicks", "gone"]) == {"clicks": (0, 1), "gone": None}
    assert layout.partition_states([("clicks", 1)])[("clicks", 1)].leader == 2
    assert layout.broker(2).port == 9093 and layout.topics() == ["clicks"]
    assert layout.metadata().controller_id == 2
    assert layout.asked == 1  # reused within min_refresh_s
    layout.refresh()
    assert layout.asked == 2
    layout.invalidate()  # a request failed on the answer: the next read asks, without asking now
    assert layout.asked == 2
    layout.topics()
    layout.topics()
    assert layout.asked == 3


def test_a_stale_answer_is_asked_again() -> None:
    layout = _Answered(min_refresh_s=0)
    layout.topics()
    layout.topics()
    assert layout.asked == 2


def test_known_brokers_are_asked_before_the_bootstrap_addresses() -> None:
    layout = _Answered()
    assert layout._candidates() == [("seed", 9092)]
    layout.metadata()
    assert layout._candidates() == [("b1", 9092), ("b2", 9093), ("seed", 9092)]


def test_internal_topics_are_refused_before_any_request() -> None:
    layout = _Answered()
    with pytest.raises(InternalTopicError, match="__consumer_offsets is an internal topic"):
        BrokerTopics(layout).delete(["clicks", "__consumer_offsets"])
    assert layout.asked == 0


def test_bootstrap_servers_stand_in_for_zookeeper_only_with_broker_coordination() -> None:
    config = ConsumerConfig.from_properties({"group.id": "g", "group.coordination": "kafka",
                                             "bootstrap.servers": "b1:9092,b2:9093"})
    assert config.zookeeper_connect == "" and config.metadata_max_age_ms == 300000
    with pytest.raises(ConfigError, match="'bootstrap.servers': a value is required with group.coordination=kafka"):
        ConsumerConfig.from_properties({"group.id": "g", "group.coordination": "kafka"})
    with pytest.raises(ConfigError, match="'zookeeper.connect': a value is required \\(only group.coordination"):
        ConsumerConfig.from_properties({"group.id": "g", "bootstrap.servers": "b1:9092"})
    with pytest.raises(ConfigError, match="bootstrap.servers.*expected HOST:PORT"):
        ConsumerConfig.from_properties({"group.id": "g", "group.coordination": "kafka", "bootstrap.servers": "b1"})


def test_metadata_changes_that_make_the_leader_rejoin() -> None:
    assert metadata_changes({"a": 2, "b": 1}, {"a": (0, 1), "b": (0,)}) == []
    assert metadata_changes({"a": 2}, {"a": (0, 1, 2)}) == ["topic a has 3 partitions (the assignment used 2)"]
    assert metadata_changes({"a": 2, "new": 0}, {"a": (0, 1), "new": (0,)}) == [
        "topic new has 1 partitions (the assignment used 0)"]
    assert metadata_changes({"gone": 1}, {"gone": None}) == ["topic gone has 0 partitions (the assignment used 1)"]


@pytest.mark.parametrize(("offered", "version", "topics"), [
    ((0, 0), 0, []),     # Kafka 0.8/0.9 (broker.version.fallback): v0, where an empty list means every topic
    ((0, 1), 1, None),   # Kafka 0.10.0: v1 and later, where null means every topic (an empty list: none)
    ((0, 12), 8, None),  # the last non-flexible version
])
def test_old_brokers_are_asked_metadata_v0_for_every_topic(offered: tuple[int, int], version: int,
                                                           topics: list[str] | None) -> None:
    from metaq.client.metadata import all_topics_request, metadata_version
    from metaq.protocol.apis import ApiKey

    assert metadata_version({ApiKey.METADATA: offered}) == version
    assert all_topics_request(version)["topics"] == topics


def test_a_v0_answer_has_no_controller() -> None:
    v0 = NS(brokers=ANSWER.brokers, topics=[NS(error_code=0, name="clicks", partitions=[
        NS(partition_index=0, leader_id=1, replica_nodes=[1], isr_nodes=[1])])])
    snapshot = parse_metadata(v0, "PLAINTEXT")
    assert snapshot.controller_id == -1
    assert snapshot.states[("clicks", 0)].leader == 1
