"""groups list/describe with the coordinators' (protocol) groups: KIND and STATE, members and their assignment
as partition owners; from in-memory ZooKeeper data and a fake coordinator listing."""

from __future__ import annotations

from dataclasses import dataclass, field

from kafka.protocol.admin import DescribeGroupsResponse, ListGroupsResponse
from kafka.protocol.consumer import ConsumerProtocolAssignment

from metaq.admin.broker_groups import (
    CoordinatorGroup,
    CoordinatorListing,
    CoordinatorMember,
    decode_assignment,
    groups_from_responses,
)
from metaq.admin.group_listing import group_listing
from metaq.admin.groups import OK, GroupDescription, describe_group
from metaq.cli.groups import member_rows, render_list, state_rows
from tests.admin.fakes import NOW_MS, FakeKafkaOffsets, FakeLayout, FakeLogOffsets


@dataclass
class FakeCoordinators:
    groups: list[CoordinatorGroup] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def list(self) -> CoordinatorListing:
        return CoordinatorListing({g.group: g for g in self.groups}, list(self.notes))


STDG = CoordinatorGroup("stdg", 0, "Stable", "consumer", "range", (
    CoordinatorMember("rdkafka-1", "rdkafka", "/127.0.0.1", (("clicks", 0), ("clicks", 1))),))


def test_list_shows_kind_and_the_coordinators_state() -> None:
    layout = FakeLayout(topics_={"clicks": 2})
    layout.join("etl", "etl_h-1700000000000-6b2a1f0c", {"clicks": 1})
    layout.write_offset("mixed", "clicks", 0, 3)
    offsets_only = CoordinatorGroup("mixed", 1, "Empty", "")  # a ZooKeeper group committing to Kafka too
    listing = group_listing(layout, FakeCoordinators([STDG, offsets_only], ["broker 2 did not answer"]))  # type: ignore[arg-type]
    rows = {s.group: (s.kind, s.members, s.state, s.topics) for s in listing.groups}
    assert rows == {"etl": ("zookeeper", 1, "Stable", []), "mixed": ("both", 0, "Empty", ["clicks"]),
                    "stdg": ("protocol", 1, "Stable", ["clicks"])}
    assert listing.notes == ["broker 2 did not answer"]


def test_list_states_are_kafkas_for_both_kinds_and_an_empty_protocol_group_shows_its_topics() -> None:
    """STATE reads the same for ZooKeeper and protocol groups (Kafka's Stable/Empty), and a protocol group
    without members (Empty: nothing assigned) shows the topics of its offsets in __consumer_offsets."""
    layout = FakeLayout(topics_={"clicks": 2, "views": 1})
    layout.join("live", "live_h-1700000000000-6b2a1f0c", {"clicks": 1})
    layout.write_offset("idle", "clicks", 0, 3)
    kafka = FakeKafkaOffsets({"stdg-empty": {("views", 0): 7, ("clicks", 1): 2}})
    empty = CoordinatorGroup("stdg-empty", 0, "Empty", "consumer")
    listing = group_listing(layout, FakeCoordinators([STDG, empty]), kafka)  # type: ignore[arg-type]
    rows = {s.group: (s.kind, s.state, s.topics) for s in listing.groups}
    assert rows == {"live": ("zookeeper", "Stable", []), "idle": ("zookeeper", "Empty", ["clicks"]),
                    "stdg": ("protocol", "Stable", ["clicks"]),
                    "stdg-empty": ("protocol", "Empty", ["clicks", "views"])}
    assert "Empty" in render_list(listing.groups) and "active" not in render_list(listing.groups)


def _stdg() -> tuple[FakeLayout, FakeLogOffsets, GroupDescription]:
    """Two partitions of clicks, both assigned to STDG's one member."""
    layout = FakeLayout(topics_={"clicks": 2})
    logs = FakeLogOffsets()
    for p in range(2):
        logs.set("clicks", p, 0, 10)
    return layout, logs, describe_group(layout, logs, "stdg", now_ms=lambda: NOW_MS,  # type: ignore[arg-type]
                                        coordinators=FakeCoordinators([STDG]))


def test_describe_a_protocol_group_names_its_members_as_owners() -> None:
    _, _, d = _stdg()
    assert d.active and d.protocol == STDG and d.to_json()["protocol"]["members"][0]["member_id"] == "rdkafka-1"
    assert [(r.partition, r.owner, r.status) for r in d.partitions] == [(0, "rdkafka-1", OK), (1, "rdkafka-1", OK)]


def test_groups_from_responses_decode_consumer_assignments() -> None:
    assignment = ConsumerProtocolAssignment(version=0, assigned_partitions=[
        ConsumerProtocolAssignment.TopicPartition(topic="clicks", partitions=[1, 0])], user_data=None)
    Member = DescribeGroupsResponse.DescribedGroup.DescribedGroupMember
    described = DescribeGroupsResponse[4](throttle_time_ms=0, groups=[
        DescribeGroupsResponse.DescribedGroup(error_code=0, group_id="stdg", group_state="Stable",
                                              protocol_type="consumer", protocol_data="range", members=[
            Member(member_id="m", group_instance_id=None, client_id="c", client_host="/h", member_metadata=b"",
                   member_assignment=bytes(assignment.encode()))]),
        DescribeGroupsResponse.DescribedGroup(error_code=0, group_id="gone", group_state="Dead", protocol_type="",
                                              protocol_data="", members=[])])
    listed = ListGroupsResponse[2](throttle_time_ms=0, error_code=0, groups=[
        ListGroupsResponse.ListedGroup(group_id="stdg", protocol_type="consumer")])
    assert groups_from_responses(3, listed, described) == {"stdg": CoordinatorGroup(
        "stdg", 3, "Stable", "consumer", "range", (CoordinatorMember("m", "c", "/h", (("clicks", 0), ("clicks", 1))),))}
    assert decode_assignment(b"\x00") == ()


def test_describe_state_and_members_views_as_kafka_consumer_groups() -> None:
    """--state: COORDINATOR (ID), ASSIGNMENT-STRATEGY, STATE, #MEMBERS; --members (--verbose): #PARTITIONS and
    Kafka's topic(p,p) assignment, for a protocol group and for a ZooKeeper group's members."""
    layout, logs, d = _stdg()
    assert state_rows(d) == [("stdg", "broker 0", "range", "Stable", 1)]
    assert member_rows(d, verbose=True) == [("stdg", "rdkafka-1", "/127.0.0.1", "rdkafka", 2, "clicks(0,1)")]

    layout.join("etl", "etl_h-1", {"clicks": 1})
    layout.own("etl", "clicks", 1, "etl_h-1-0")
    layout.commit("etl", "clicks", 1, 4)
    z = describe_group(layout, logs, "etl", now_ms=lambda: NOW_MS,  # type: ignore[arg-type]
                       coordinators=FakeCoordinators())
    assert state_rows(z) == [("etl", "zookeeper", None, "Stable", 1)]
    assert member_rows(z) == [("etl", "etl_h-1", None, None, 1)]
    assert member_rows(z, verbose=True)[0][-1] == "clicks(1)"
