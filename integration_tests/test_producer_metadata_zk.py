"""ClusterMetadata over the real ZkLayout of a real ZooKeeper."""

from __future__ import annotations

import pytest

from metaq.errors import UnknownTopicError
from metaq.producer.metadata import ClusterMetadata, Leader


def test_from_zookeeper_reads_the_real_layout(zk_connect, zk_layout):
    from zk_layout import BrokerInfo, PartitionState

    zk_layout.ensure_persistent_paths()
    zk_layout.register_broker(BrokerInfo(id=3, host="127.0.0.1", port=9999,
                                         endpoints=("PLAINTEXT://127.0.0.1:9999",), timestamp_ms=0))
    zk_layout.create_topic("clicks", {0: [3], 1: [3]},
                           {0: PartitionState(leader=3, leader_epoch=0, isr=(3,), controller_epoch=1)})
    md = ClusterMetadata.from_zookeeper(zk_connect, session_timeout_ms=3000)
    try:
        info = md.topic("clicks")
        assert info.partitions == (0, 1)
        assert info.leaders[0] == Leader("127.0.0.1", 9999, 3)
        assert info.leaders[1] == Leader("127.0.0.1", 9999, 3)  # no state node: the preferred replica
        with pytest.raises(UnknownTopicError):
            md.topic("views")
    finally:
        md.close()
