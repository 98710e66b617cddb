"""The Kafka 0.8 ZooKeeper schema: paths (:mod:`zk_layout.paths`), node codecs (``zk_layout.*_formats``) and
typed reads/writes over kazoo (:mod:`zk_layout.store`).

This package is the only code that knows a ZooKeeper path. It depends on kazoo, google-re2 (topic filters),
the standard library and :mod:`metaq.errors` only, so that tools can use it without the rest of metaq.
"""

from __future__ import annotations

from zk_layout import paths
from zk_layout.broker_formats import BrokerInfo, parse_endpoint
from zk_layout.cluster_formats import ClusterId, ControllerInfo, decode_controller_epoch, encode_controller_epoch
from zk_layout.consumer_formats import (
    BLACK_LIST,
    STATIC,
    WHITE_LIST,
    TopicCount,
    decode_offset,
    decode_owner,
    encode_offset,
    encode_owner,
    normalize_topic_filter,
)
from zk_layout.paths import split_connect, validate_group, validate_topic
from zk_layout.store import (
    ConsumerNode,
    FencedOffset,
    OffsetNode,
    OwnerNode,
    ScramCredential,
    ZkLayout,
    new_cluster_id,
    parse_offset_path,
)
from zk_layout.topic_formats import ConfigChange, PartitionState, TopicAssignment, TopicConfig

__all__ = [
    "BLACK_LIST",
    "STATIC",
    "WHITE_LIST",
    "BrokerInfo",
    "ClusterId",
    "ConfigChange",
    "ConsumerNode",
    "ControllerInfo",
    "PartitionState",
    "ScramCredential",
    "FencedOffset",
    "OffsetNode",
    "OwnerNode",
    "TopicAssignment",
    "TopicConfig",
    "TopicCount",
    "ZkLayout",
    "decode_controller_epoch",
    "decode_offset",
    "decode_owner",
    "encode_controller_epoch",
    "encode_offset",
    "encode_owner",
    "new_cluster_id",
    "normalize_topic_filter",
    "parse_endpoint",
    "parse_offset_path",
    "paths",
    "split_connect",
    "validate_group",
    "validate_topic",
]
