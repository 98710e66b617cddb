"""Typed reads and writes of the Kafka 0.8 ZooKeeper layout over a started KazooClient.

Usage::

    layout = ZkLayout(client)               # client rooted at the chroot (see metaq.zkclient.connect)
    layout.ensure_persistent_paths()
    layout.register_broker(BrokerInfo.plaintext(0, "127.0.0.1", 9092))   # ephemeral: gone with the session
    layout.create_topic("clicks", {0: [0], 1: [0]}, {0: state, 1: state})
    layout.write_offset("etl", "clicks", 0, 4213)
    layout.offsets("etl")                   # {("clicks", 0): 4213}

Errors: a missing node reads as None (or an empty list); a node whose data does not parse raises
:class:`MalformedNodeError` with the node's full path (chroot included); losing the connection raises
:class:`ZooKeeperUnavailableError` (retriable); anything else ZooKeeper refuses raises
:class:`ZooKeeperError`.
Every kazoo error is chained with ``from``.
"""

from __future__ import annotations

from zk_layout._nodes import Watch
from zk_layout.acls import _Acls
from zk_layout.brokers import _Brokers, new_cluster_id
from zk_layout.controller import ControllerEpoch
from zk_layout.groups import ConsumerNode, OwnerNode, _Groups
from zk_layout.log_dirs import _LogDirs
from zk_layout.migration import _Migration
from zk_layout.offsets import NO_OFFSET, FencedOffset, OffsetNode, _Offsets, parse_offset_path
from zk_layout.producer_ids import _ProducerIds
from zk_layout.quotas import _Quotas
from zk_layout.reassignment import _Reassignment
from zk_layout.users import ScramCredential

__all__ = [
    "NO_OFFSET",
    "ConsumerNode",
    "ControllerEpoch",
    "FencedOffset",
    "OffsetNode",
    "OwnerNode",
    "ScramCredential",
    "Watch",
    "ZkLayout",
    "new_cluster_id",
    "parse_offset_path",
]


class ZkLayout(_Brokers, _Quotas, _Groups, _Offsets, _Acls, _Reassignment, _ProducerIds, _LogDirs, _Migration):
    """Typed access to the Kafka 0.8 ZooKeeper layout; see the module docstring.

    ``stale_node_wait_s`` bounds how long :meth:`register_broker` and :meth:`register_consumer` wait for an
    ephemeral node held by another session (after a kill -9, the previous run's) to expire before giving up
    (a broker passes a longer wait: its session timeout plus a margin). Thread-safe as kazoo is.

    The methods live by concept: kazoo plumbing in :mod:`zk_layout._nodes`, brokers and the cluster id in
    :mod:`zk_layout.brokers`, topics and topic admin in :mod:`zk_layout.topics`, members and owners in
    :mod:`zk_layout.groups`, offsets and fencing in :mod:`zk_layout.offsets`, ACLs in :mod:`zk_layout.acls`,
    the controller's election and fenced state writes in :mod:`zk_layout.controller`, producer id blocks in
    :mod:`zk_layout.producer_ids`, failed log directories in :mod:`zk_layout.log_dirs`,
    partition reassignment in :mod:`zk_layout.reassignment`, live group migration in :mod:`zk_layout.migration`.
    """
