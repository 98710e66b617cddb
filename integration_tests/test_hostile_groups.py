"""Hostile group input against a real broker (third round): JoinGroup metadata and OffsetCommit are bounded,
and a well-behaved client keeps working beside the attack."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse
from kafka.protocol.consumer import (
    JoinGroupRequest,
    JoinGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from metaq.client.request_codec import build_request
from metaq.errors import ErrorCode
from metaq.testing.broker import call, request
from metaq.testing.probes import RssSampler, WellBehavedClient
from metaq.testing.wait import wait_until
from zk_layout import ZkLayout

MIB = 1 << 20


@pytest.fixture
def group_broker(broker_cluster, make_topic) -> Any:
    broker = broker_cluster.add(0, **{"offsets.topic.num.partitions": 1, "message.max.bytes": 50000})
    make_topic("probe")
    make_topic("real", partitions=20)
    wait_until(lambda: request(broker.bootstrap, FindCoordinatorRequest[1](key="g", key_type=0),
                               FindCoordinatorResponse, 1).error_code == 0, 30, "a coordinator")
    wait_until(lambda: _commit(broker.bootstrap, 2, "warm", {"real": [0]}) == {("real", 0): 0}, 30,
               "the offsets partition loaded")
    return broker


def _join_request(group: str, member: str, metadata: bytes) -> Any:
    return build_request(JoinGroupRequest, 2, {
        "group_id": group, "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000, "member_id": member,
        "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": metadata}]})


def _join(bootstrap: str, group: str, metadata: bytes) -> Any:
    return request(bootstrap, _join_request(group, "", metadata), JoinGroupResponse, 2, timeout=60)


def _members(bootstrap: str, group: str) -> int:
    [described] = request(bootstrap, DescribeGroupsRequest[0](groups=[group]), DescribeGroupsResponse, 0).groups
    return len(described.members)


def test_join_group_metadata_is_bounded_per_member_and_per_group(group_broker) -> None:
    bootstrap = group_broker.bootstrap
    assert group_broker.pid is not None
    waiting: list[socket.socket] = []
    with RssSampler(group_broker.pid) as rss, WellBehavedClient(bootstrap, "probe") as client:
        # one member over metaq.group.max.member.metadata.bytes (1 MiB): refused (before: 20 x 10 MB, +1 GB)
        for _ in range(5):
            assert _join(bootstrap, "big", b"x" * (2 * MIB)).error_code == ErrorCode.INVALID_REQUEST
        # members of 1 MiB each up to metaq.group.max.metadata.bytes (8 MiB): the 9th would pass it
        first = _join(bootstrap, "wide", b"x" * (MIB - 100))
        assert first.error_code == 0
        for _ in range(7):  # these wait in the rebalance they started: their answers are not read
            s = socket.create_connection(bootstrap.rsplit(":", 1), timeout=60)  # type: ignore[arg-type]
            req = _join_request("wide", "", b"x" * (MIB - 100))
            req.with_header(correlation_id=1, client_id="hostile")
            s.sendall(bytes(req.encode(header=True, framed=True)))
            waiting.append(s)
        wait_until(lambda: _members(bootstrap, "wide") == 8, 30, "8 members")
        assert _join(bootstrap, "wide", b"x" * (MIB - 100)).error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    for s in waiting:
        s.close()
    assert not client.failures, client.failures[:3]
    assert "metaq.group.max.member.metadata.bytes" in group_broker.log_tail(300)
    assert "metaq.group.max.metadata.bytes" in group_broker.log_tail(300)
    assert rss.growth_mb < 150, f"broker RSS grew {rss.growth_mb:.0f} MB"


def _commit(bootstrap: str, version: int, group: str, partitions: dict[str, list[int]],
            metadata: str = "") -> dict[tuple[str, int], int]:
    fields: dict[str, Any] = {"group_id": group, "topics": [
        {"name": t, "partitions": [{"partition_index": p, "committed_offset": 7, "committed_metadata": metadata,
                                    "committed_leader_epoch": -1, "commit_timestamp": -1} for p in ps]}
        for t, ps in partitions.items()]}
    if version >= 1:
        fields.update(generation_id_or_member_epoch=-1, member_id="", group_instance_id=None)
    if 2 <= version <= 4:
        fields["retention_time_ms"] = -1
    with socket.create_connection(bootstrap.rsplit(":", 1), timeout=60) as s:  # type: ignore[arg-type]
        resp = call(s, build_request(OffsetCommitRequest, version, fields), OffsetCommitResponse, version)
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def test_offset_commit_refuses_unknown_partitions_bad_names_and_oversized_batches(group_broker,
                                                                                   zk_layout: ZkLayout) -> None:
    bootstrap = group_broker.bootstrap
    unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    for version in (0, 2, 7):
        # before: code 0 for all, stored without limit (v1+) or in ZooKeeper (v0)
        errors = _commit(bootstrap, version, "g", {"real": [0, 1, 20], "nope": [0]})
        assert errors == {("real", 0): 0, ("real", 1): 0, ("real", 20): unknown, ("nope", 0): unknown}, version
    assert zk_layout.read_offset("g", "real", 0) == 7
    assert zk_layout.read_offset("g", "nope", 0) is None

    # v0 writes ZooKeeper paths: names that are none are refused as such (before: UNKNOWN_SERVER_ERROR)
    for group in ("../brokers", "a/b", "g\x00"):
        assert set(_commit(bootstrap, 0, group, {"real": [0]}).values()) == {ErrorCode.INVALID_GROUP_ID}
    for topic in ("../brokers", "a/b", "t\x00"):
        assert _commit(bootstrap, 0, "g", {topic: [0]}) == {(topic, 0): ErrorCode.INVALID_TOPIC_EXCEPTION}

    # a batch over message.max.bytes: Kafka's size error, not KAFKA_STORAGE_ERROR (retried for ever)
    errors = _commit(bootstrap, 2, "g", {"real": [0, 1]}, metadata="m" * 4000)  # fine: 2 x 4 KB
    assert set(errors.values()) == {0}
    errors = _commit(bootstrap, 2, "g", {"real": list(range(20))}, metadata="m" * 4000)  # 80 KB > 50,000
    assert set(errors.values()) == {ErrorCode.INVALID_COMMIT_OFFSET_SIZE}, set(errors.values())
