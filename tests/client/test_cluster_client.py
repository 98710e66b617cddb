"""ClusterClient's parts that need no broker: one Leader type for every client, and connection settings
(against ZooKeeper and real brokers: integration_tests/test_cluster_client.py)."""

from __future__ import annotations

import pytest

from metaq.client.cluster import Leader
from metaq.client.security import SecurityConfig
from metaq.client.settings import ConnectionSettings
from metaq.errors import ConfigError


def test_the_parts_share_one_leader_type() -> None:
    from metaq.consumer.leader_finder import Leader as ConsumerLeader
    from metaq.producer import Leader as ProducerLeader
    from metaq.spark.cluster import Leader as SparkLeader

    assert ConsumerLeader is ProducerLeader is SparkLeader is Leader


def test_connection_settings_are_checked_and_keep_security_across_limits() -> None:
    with pytest.raises(ConfigError, match="'security.protocol': 'TLS' must be one of"):
        ConnectionSettings(security=SecurityConfig(security_protocol="TLS"))
    with pytest.raises(ConfigError, match="request_timeout_ms must be positive"):
        ConnectionSettings(request_timeout_ms=0)
    base = ConnectionSettings(client_id="a", request_timeout_ms=1000)
    changed = base.with_limits(max_response_bytes=5, client_id="b")
    assert (changed.client_id, changed.request_timeout_ms, changed.max_response_bytes) == ("b", 1000, 5)
    assert changed.security_protocol == base.security_protocol
    conn = changed.new_connection("127.0.0.1", 1)
    assert (conn.client_id, conn.request_timeout, conn.max_response_bytes, conn.is_connected) == ("b", 1.0, 5, False)
