"""Topic partitions and their leaders as the producer sees them: :class:`metaq.client.ClusterClient`'s cache.

The producer reads the Kafka 0.8 layout that the broker and tools maintain: ``/brokers/topics/<t>`` for the
partitions, ``.../partitions/<p>/state`` for each leader, ``/brokers/ids/<id>`` for its address::

    metadata = ClusterMetadata.from_zookeeper("127.0.0.1:2181/metaq")
    metadata.partitions_for("clicks")          # [0, 1, 2]
    metadata.leader_for("clicks", 1)           # Leader(host='127.0.0.1', port=9092, broker_id=0)

Reads are cached per topic for ``metadata.max.age.ms``; :meth:`ClusterMetadata.invalidate` forces the next
lookup to go back to ZooKeeper (after NOT_LEADER_OR_FOLLOWER and the like). Tests substitute a fake layout
(any object with the ZkLayout methods of :class:`metaq.client.cluster.Layout`) or a whole fake ClusterMetadata.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from metaq import zkclient
from metaq.client.cluster import ClusterClient, Layout, Leader, TopicInfo
from metaq.client.settings import ConnectionSettings
from metaq.zksecurity import ZooKeeperSecurity
from zk_layout import ZkLayout

__all__ = ["ClusterMetadata", "Layout", "Leader", "TopicInfo"]


class ClusterMetadata(ClusterClient):
    """The producer's cluster client: a partition without a state node yet is taken to be led by its first
    live replica (a wrong guess is answered NOT_LEADER_OR_FOLLOWER and re-read); thread-safe."""

    def __init__(self, layout: Layout, settings: ConnectionSettings | None = None, *, max_age_ms: int = 300000,
                 on_close: Callable[[], None] | None = None) -> None:
        super().__init__(layout, settings, metadata_max_age_ms=max_age_ms, assume_preferred_leader=True,
                         on_close=on_close)

    @classmethod
    def from_zookeeper(cls, connect: str, settings: ConnectionSettings | None = None, *,
                       session_timeout_ms: int = 6000, connection_timeout_ms: int = 6000,
                       security: ZooKeeperSecurity | None = None, **kwargs: Any) -> ClusterMetadata:
        """Connect a kazoo client (via metaq.zkclient, with the ZooKeeper ``security`` of the producer's
        config) and read through zk_layout.ZkLayout; the session is closed by :meth:`close`."""
        zk = zkclient.connect(connect, session_timeout_ms=session_timeout_ms,
                              connection_timeout_ms=connection_timeout_ms, security=security)
        return cls(ZkLayout(zk), settings, on_close=lambda: zkclient.close(zk), **kwargs)
