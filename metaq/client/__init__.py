"""The Kafka wire client: one blocking, pipelining connection per broker, API version negotiation, and the
cluster client every part of metaq reaches the brokers through."""

from __future__ import annotations

from metaq.client.cluster import (
    EARLIEST,
    LATEST,
    ClusterClient,
    Leader,
    ListedOffset,
    NoLeader,
    TopicInfo,
    TopicPartition,
)
from metaq.client.connection import BrokerConnection, InFlightRequest, build_request
from metaq.client.settings import ConnectionSettings
from metaq.client.versions import CLIENT_VERSIONS, ApiKey, pick_version

__all__ = [
    "CLIENT_VERSIONS",
    "EARLIEST",
    "LATEST",
    "ApiKey",
    "BrokerConnection",
    "ClusterClient",
    "ConnectionSettings",
    "InFlightRequest",
    "Leader",
    "ListedOffset",
    "NoLeader",
    "TopicInfo",
    "TopicPartition",
    "build_request",
    "pick_version",
]
