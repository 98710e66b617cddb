"""ZkLayout against nodes written by hand (or by a hostile client), on a real ZooKeeper."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from metaq.errors import MalformedNodeError, ZooKeeperError
from zk_layout import BrokerInfo, TopicCount, ZkLayout, paths

BROKER_JSON = json.dumps({"version": 5, "host": "127.0.0.1", "port": 9092,
                          "endpoints": ["PLAINTEXT://127.0.0.1:9092"]}).encode()


def test_brokers_leave_out_unservable_nodes_when_asked(zk_layout: ZkLayout, zk: KazooClient) -> None:
    good = BrokerInfo.plaintext(1, "127.0.0.1", 9092, timestamp_ms=1)
    zk_layout.register_broker(good)
    zk.create("/brokers/ids/4294967296", BROKER_JSON, makepath=True)
    zk.create("/brokers/ids/5", b"{not json", makepath=True)
    skipped: list[MalformedNodeError] = []
    assert zk_layout.brokers(skipped=skipped) == {1: good}
    full = zk_layout.full_path
    assert sorted(e.path for e in skipped) == [full("/brokers/ids/4294967296"), full("/brokers/ids/5")]
    assert "int32" in str(next(e for e in skipped if e.path.endswith("4294967296")))
    assert zk_layout.broker_ids() == [1, 5]  # the id that fits is an id; its data is what is malformed
    with pytest.raises(MalformedNodeError, match="/brokers/ids/5"):
        zk_layout.brokers()


def test_stale_registration_with_other_endpoints_is_waited_out(
        zk_layout: ZkLayout, make_zk_client: Callable[..., KazooClient]) -> None:
    """After a kill -9 the restarted broker may listen elsewhere; the old session's node is still waited for."""
    old = make_zk_client()
    ZkLayout(old).register_broker(BrokerInfo.plaintext(3, "10.0.0.1", 9092, timestamp_ms=1))
    threading.Timer(0.5, old.stop).start()
    ZkLayout(zk_layout.client).register_broker(BrokerInfo.plaintext(3, "10.0.0.2", 9093, timestamp_ms=2),
                                               stale_wait_s=30)
    info = zk_layout.broker(3)
    assert info is not None and (info.host, info.port) == ("10.0.0.2", 9093)


def test_live_holder_is_refused_after_the_wait_naming_its_endpoint(
        zk_layout: ZkLayout, make_zk_client: Callable[..., KazooClient]) -> None:
    ZkLayout(make_zk_client()).register_broker(BrokerInfo.plaintext(1, "10.0.0.1", 9092))
    with pytest.raises(ZooKeeperError, match=r"broker id 1 already registered .* by the broker at "
                                             r"PLAINTEXT://10\.0\.0\.1:9092 \(session 0x[0-9a-f]+\), still alive"):
        zk_layout.register_broker(BrokerInfo.plaintext(1, "10.0.0.2", 9092), stale_wait_s=0.3)


def test_persistent_broker_node_is_refused_at_once(zk_layout: ZkLayout, zk: KazooClient) -> None:
    zk.create("/brokers/ids/4", BROKER_JSON, makepath=True)
    with pytest.raises(ZooKeeperError, match="broker id 4 already registered .* by a persistent node"):
        zk_layout.register_broker(BrokerInfo.plaintext(4, "127.0.0.1", 9092), stale_wait_s=60)


def test_negative_offset_is_malformed_for_readers_and_none_for_a_fence(zk_layout: ZkLayout, zk: KazooClient) -> None:
    path = paths.offset_path("g", "t", 0)
    zk.create(path, b"-5", makepath=True)
    zk_layout.write_offset("g", "t", 1, 7)
    with pytest.raises(MalformedNodeError, match=f"malformed node {zk_layout.full_path(path)}: negative offset -5"):
        zk_layout.offset_nodes("g")
    fenced = zk_layout.fence_offsets("g", [("t", 0), ("t", 1)])
    assert fenced[("t", 1)].offset == 7 and fenced[("t", 1)].malformed is None
    bad = fenced[("t", 0)]
    assert bad.offset is None and bad.malformed is not None and bad.malformed.path == zk_layout.full_path(path)
    committed, lost = zk_layout.commit_fenced_offsets("g", {("t", 0): (3, bad.version)})
    assert not lost and zk_layout.read_offset("g", "t", 0) == 3  # a commit replaces the bad value


def test_consumer_nodes_tell_persistent_from_ephemeral(zk_layout: ZkLayout, zk: KazooClient) -> None:
    zk_layout.register_consumer("g", "g_live", TopicCount({"t": 1}))
    zk.create(paths.consumer_id_path("g", "g_fake"), TopicCount({"t": 100000}).encode(), makepath=True)
    nodes = zk_layout.consumer_nodes("g")
    assert nodes["g_live"].ephemeral and not nodes["g_fake"].ephemeral
    assert nodes["g_fake"].registration.subscription == {"t": 100000}
