"""The Kafka wire client: one blocking, pipelining connection per broker, API version negotiation, and the
cluster client every part of metaq reaches the brokers through."""

from __future__ import annotations

from typing import TYPE_CHECKING

from metaq.lazy import lazy_exports

# name -> its module, imported on first use (PEP 562): ``metaq.client.security`` (the ops tools' option
# parsing) must not pull in kafka-python's protocol through this package.
_HOMES = {
    "EARLIEST": "cluster", "LATEST": "cluster", "ClusterClient": "cluster", "Leader": "cluster",
    "ListedOffset": "cluster", "NoLeader": "cluster", "TopicInfo": "cluster", "TopicPartition": "cluster",
    "BrokerConnection": "connection", "InFlightRequest": "in_flight", "build_request": "request_codec",
    "ConnectionSettings": "settings",
    "CLIENT_VERSIONS": "versions", "ApiKey": "versions", "pick_version": "versions",
}

if TYPE_CHECKING:
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
    from metaq.client.connection import BrokerConnection
    from metaq.client.in_flight import InFlightRequest
    from metaq.client.request_codec import build_request
    from metaq.client.settings import ConnectionSettings
    from metaq.client.versions import CLIENT_VERSIONS, ApiKey, pick_version


__getattr__ = lazy_exports(__name__, globals(), _HOMES)

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
