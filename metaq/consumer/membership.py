"""What either kind of group member (:class:`metaq.consumer.rebalance.ZKRebalancerListener` with ZooKeeper,
:class:`metaq.consumer.coordination.GroupMember` with the broker's coordinator) shares with the connector: the
application's hooks around ownership changes, the subscription it asks for, the snapshot ``Consumer.state``
reports.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from metaq.consumer.offset_store import TopicPartition
from metaq.consumer.partition_info import ChunkQueue, PartitionTopicInfo
from metaq.errors import ConsumerRebalanceFailedError
from zk_layout import TopicCount

log = logging.getLogger(__name__)


class RebalanceListener(Protocol):
    """Hooks around ownership changes. They run on the rebalance thread: keep them short."""

    def before_release(self, partitions: Mapping[str, set[int]]) -> None: ...

    def assigned(self, consumer_id: str, assignment: Mapping[str, Mapping[int, str]]) -> None: ...

    def rebalance_failed(self, error: ConsumerRebalanceFailedError) -> None: ...


@dataclass
class ConsumerState:
    """A snapshot of the member for ``Consumer.state``."""

    state: str
    generation: int
    owned: dict[TopicPartition, str] = field(default_factory=dict)
    last_error: str | None = None

    @classmethod
    def of(cls, state: str, generation: int, registry: Mapping[TopicPartition, PartitionTopicInfo],
           last_error: str | None) -> ConsumerState:
        """The snapshot of a member owning the unrevoked partitions of ``registry``."""
        owned = {key: info.thread_id for key, info in registry.items() if not info.is_revoked}
        return cls(state, generation, owned, last_error)


def safe_hook(hook: Callable[..., Any], *args: Any) -> None:
    """Call a RebalanceListener hook; what it raises is logged, never stops the rebalance."""
    try:
        hook(*args)
    except Exception:
        log.exception("rebalance listener hook %s raised", getattr(hook, "__name__", hook))


class Subscription(Protocol):
    """What this member asked for (static topics or a whitelist/blacklist) and its registration."""

    is_wildcard: bool

    def topic_count(self) -> TopicCount: ...

    def queue_for(self, topic: str, thread_id: str) -> ChunkQueue: ...

    def clear_queues(self) -> None: ...
