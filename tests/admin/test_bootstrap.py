"""--bootstrap-server mode: Metadata read as the ZooKeeper nodes it mirrors, and what needs ZooKeeper says so."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from metaq.admin.bootstrap import BootstrapLayout, parse_metadata
from metaq.client.settings import ConnectionSettings
from metaq.errors import ConfigError
from zk_layout import PartitionState, TopicAssignment

ANSWER = NS(brokers=[NS(node_id=1, host="b1", port=9092), NS(node_id=2, host="b2", port=9093)], topics=[
    NS(error_code=0, name="clicks", partitions=[
        NS(partition_index=1, leader_id=2, leader_epoch=4, replica_nodes=[2, 1], isr_nodes=[2]),
        NS(partition_index=0, leader_id=-1, leader_epoch=-1, replica_nodes=[1], isr_nodes=[])]),
    NS(error_code=3, name="gone", partitions=[])])


def test_metadata_as_zookeeper_nodes() -> None:
    found = parse_metadata(ANSWER, "SASL_SSL")
    assert found.assignments == {"clicks": TopicAssignment({0: (1,), 1: (2, 1)})}
    assert found.states[("clicks", 1)] == PartitionState(2, 4, (2,), -1)
    assert found.states[("clicks", 0)].leader == -1
    assert found.brokers[2].endpoints == ("SASL_SSL://b2:9093",)


def test_what_needs_zookeeper_names_the_option() -> None:
    layout = BootstrapLayout("b1:9092", ConnectionSettings())
    assert layout.groups() == [] and layout.consumer_ids("etl") == [] and not layout.group_exists("etl")
    with pytest.raises(ConfigError, match="needs ZooKeeper \\(owner nodes\\): give --zookeeper or --config instead "
                                          "of --bootstrap-server"):
        layout.owner_nodes("etl")


@pytest.mark.parametrize("text", ["", "broker", "broker:", "broker:x", ":9092", "b1:9092,broker:0"])
def test_bad_addresses_name_the_option(text: str) -> None:
    with pytest.raises(ConfigError, match="--bootstrap-server"):
        BootstrapLayout.connect(text)
