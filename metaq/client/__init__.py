"""The Kafka wire client: one blocking, pipelining connection per broker, and API version negotiation."""

from __future__ import annotations

from metaq.client.connection import BrokerConnection, InFlightRequest, build_request
from metaq.client.versions import CLIENT_VERSIONS, ApiKey, pick_version

__all__ = ["CLIENT_VERSIONS", "ApiKey", "BrokerConnection", "InFlightRequest", "build_request", "pick_version"]
