"""Version negotiation: the highest version both sides speak."""

from __future__ import annotations

import pytest

from metaq.client.versions import CLIENT_VERSIONS, ApiKey, fallback_versions, pick_version
from metaq.consumer.config import ConsumerConfig
from metaq.errors import ConfigError, UnsupportedVersionError


def test_ranges_match_the_brief():
    assert CLIENT_VERSIONS[ApiKey.PRODUCE] == (0, 7)  # 0..2: message sets (metaq/producer/legacy.py)
    assert CLIENT_VERSIONS[ApiKey.FETCH] == (0, 11)
    assert CLIENT_VERSIONS[ApiKey.LIST_OFFSETS] == (0, 2)
    assert CLIENT_VERSIONS[ApiKey.METADATA] == (1, 4)
    assert CLIENT_VERSIONS[ApiKey.API_VERSIONS] == (0, 3)
    assert CLIENT_VERSIONS[ApiKey.FIND_COORDINATOR] == (0, 2)
    assert CLIENT_VERSIONS[ApiKey.OFFSET_COMMIT] == (2, 7)
    assert CLIENT_VERSIONS[ApiKey.OFFSET_FETCH] == (0, 5)


@pytest.mark.parametrize(("broker", "expected"), [
    ((0, 13), 7),   # newer broker: our maximum
    ((3, 7), 7),
    ((0, 5), 5),    # older broker: its maximum
    ((3, 3), 3),
    ((7, 9), 7),
])
def test_highest_common_version(broker, expected):
    assert pick_version(ApiKey.PRODUCE, {ApiKey.PRODUCE: broker}) == expected


@pytest.mark.parametrize("broker", [(8, 13), (9, 9)])
def test_no_overlap(broker):
    with pytest.raises(UnsupportedVersionError, match="PRODUCE"):
        pick_version(ApiKey.PRODUCE, {ApiKey.PRODUCE: broker})


def test_api_missing_on_either_side():
    with pytest.raises(UnsupportedVersionError, match="does not offer"):
        pick_version(ApiKey.FETCH, {ApiKey.PRODUCE: (0, 9)})
    with pytest.raises(UnsupportedVersionError, match="metaq's client"):
        pick_version(15, {15: (0, 5)})  # DescribeGroups: not spoken by metaq's client
    assert pick_version(11, {11: (0, 9)}) == 5  # JoinGroup: the group protocol's highest non-flexible version


@pytest.mark.parametrize(("release", "fetch", "list_offsets", "produce"), [
    ("0.8.2", 0, 0, 0), ("0.8.2.2", 0, 0, 0), ("0.9.0", 1, 0, 1), ("0.10.0", 2, 0, 2)])
def test_fallback_versions_pick_the_old_apis(release, fetch, list_offsets, produce):
    versions = fallback_versions(release)
    assert pick_version(ApiKey.FETCH, versions) == fetch
    assert pick_version(ApiKey.LIST_OFFSETS, versions) == list_offsets
    assert pick_version(ApiKey.PRODUCE, versions) == produce  # message sets v0/v1 (metaq/producer/legacy.py)


def test_unknown_fallback_release_is_a_config_error():
    with pytest.raises(ConfigError, match="0.8.2"):
        fallback_versions("0.7.2")
    with pytest.raises(ConfigError, match="broker.version.fallback"):
        ConsumerConfig.from_properties({"group.id": "g", "zookeeper.connect": "zk:2181",
                                        "broker.version.fallback": "0.7"})


@pytest.mark.parametrize("version", [0, 1, 2])
def test_commit_request_at_the_old_versions(version):
    from kafka.protocol.consumer import OffsetCommitRequest

    from metaq.client.offsets_channel import commit_request

    request = commit_request("g", {("t", 1): 42, ("t", 0): 7, ("u", 0): 3}, version)
    request.with_header(correlation_id=5, client_id="x")
    decoded = OffsetCommitRequest.decode(request.encode(header=True)[0:], version=version, header=True)
    assert decoded.group_id == "g"
    assert [(t.name, [(p.partition_index, p.committed_offset) for p in t.partitions]) for t in decoded.topics] == [
        ("t", [(0, 7), (1, 42)]), ("u", [(0, 3)])]


@pytest.mark.parametrize(("offered", "expected"), [((0, 7), 2), ((2, 9), 2), ((0, 1), 1), ((0, 0), 0)])
def test_commit_version_for_old_coordinators(offered, expected):
    from metaq.client.offsets_channel import commit_version

    assert commit_version(offered) == expected


def test_commit_version_without_a_common_one():
    from metaq.client.offsets_channel import commit_version

    with pytest.raises(UnsupportedVersionError, match="v3..7"):
        commit_version((3, 7))
    with pytest.raises(UnsupportedVersionError):
        commit_version((0, -1))  # OffsetCommit not offered
