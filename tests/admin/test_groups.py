"""groups describe/list: lag, owners and status flags from in-memory ZooKeeper data and log offsets."""

from __future__ import annotations

import pytest

from metaq.admin.group_listing import list_groups
from metaq.admin.groups import (
    NO_LEADER,
    NO_OWNER,
    OK,
    ORPHAN,
    OUT_OF_RANGE,
    STALLED,
    UNKNOWN_TOPIC,
    consumer_id_of_owner,
    describe_group,
    host_of,
    merged_offset,
    owner_is_live,
)
from metaq.cli.groups import render_description
from metaq.errors import GroupNotFoundError, UnknownTopicError
from tests.admin.fakes import NOW_MS, FakeKafkaOffsets, FakeLayout, FakeLogOffsets

A = "etl_host1-1700000000000-6b2a1f0c"
B = "etl_host2-1700000000001-0f00ba11"


def _describe(layout: FakeLayout, logs: FakeLogOffsets, group: str = "etl", **kw: object):
    return describe_group(layout, logs, group, now_ms=lambda: NOW_MS, **kw)  # type: ignore[arg-type]


def _cluster() -> tuple[FakeLayout, FakeLogOffsets]:
    layout = FakeLayout(topics_={"clicks": 3})
    logs = FakeLogOffsets()
    for p in range(3):
        logs.set("clicks", p, 0, 100 + p)
    layout.join("etl", A, {"clicks": 1})
    layout.join("etl", B, {"clicks": 1})
    layout.own("etl", "clicks", 0, f"{A}-0")
    layout.own("etl", "clicks", 1, f"{A}-0")
    layout.own("etl", "clicks", 2, f"{B}-0")
    return layout, logs


def test_lag_owner_and_commit_times_per_partition() -> None:
    layout, logs = _cluster()
    layout.commit("etl", "clicks", 0, 90, age_ms=2000)
    layout.commit("etl", "clicks", 1, 101)
    layout.commit("etl", "clicks", 2, None)  # fenced, never committed
    d = _describe(layout, logs)
    rows = {p.partition: p for p in d.partitions}
    assert [(r.offset, r.log_end, r.lag, r.owner, r.status) for r in rows.values()] == [
        (90, 100, 10, f"{A}-0", OK), (101, 101, 0, f"{A}-0", OK), (None, 102, None, f"{B}-0", OK)]
    assert rows[0].consumer_id == A
    assert rows[0].last_commit_ms == NOW_MS - 2000 and rows[0].first_commit_ms == NOW_MS - 7000
    assert d.total_lag == 10 and d.active
    assert [(m.consumer_id, m.host, m.subscription) for m in d.members] == [
        (A, "host1", {"clicks": 1}), (B, "host2", {"clicks": 1})]
    doc = d.to_json()
    assert doc["partitions"][0]["lag"] == 10 and doc["partitions"][2]["offset"] is None
    assert doc["members"][1]["host"] == "host2"


def test_status_flags() -> None:
    layout, logs = _cluster()
    del layout.owner_data["etl"][("clicks", 1)]  # a partition nobody owns while members exist
    layout.own("etl", "clicks", 2, "etl_dead-1700000000002-deadbeef-0")  # names an unregistered consumer
    layout.commit("etl", "clicks", 0, 150)  # beyond the log end
    layout.commit("etl", "gone", 0, 5)  # offsets for a deleted topic
    d = _describe(layout, logs)
    assert {(p.topic, p.partition): p.status for p in d.partitions} == {
        ("clicks", 0): OUT_OF_RANGE, ("clicks", 1): NO_OWNER, ("clicks", 2): ORPHAN, ("gone", 0): UNKNOWN_TOPIC}
    assert [p.status for p in d.problems()] == [OUT_OF_RANGE, NO_OWNER, ORPHAN, UNKNOWN_TOPIC]


def test_stalled_and_no_leader() -> None:
    layout, logs = _cluster()
    layout.commit("etl", "clicks", 0, 50, age_ms=20 * 60 * 1000)  # lagging and 20 minutes without a commit
    layout.commit("etl", "clicks", 1, 101, age_ms=20 * 60 * 1000)  # idle but caught up: fine
    del logs.marks[("clicks", 2)]
    d = _describe(layout, logs, stall_after_ms=10 * 60 * 1000)
    assert [p.status for p in d.partitions] == [STALLED, OK, NO_LEADER]
    assert d.partitions[2].log_end is None and d.partitions[2].lag is None


def test_group_without_members_is_described_without_owner_flags() -> None:
    layout = FakeLayout(topics_={"clicks": 2})
    logs = FakeLogOffsets()
    logs.set("clicks", 0, 10, 20)
    logs.set("clicks", 1, 0, 5)
    layout.commit("old", "clicks", 0, 12)
    d = _describe(layout, logs, "old")
    assert not d.active and d.members == []
    assert [(p.partition, p.lag, p.status) for p in d.partitions] == [(0, 8, OK)]  # only partitions it committed


def test_topic_filter_and_unknown_topic() -> None:
    layout, logs = _cluster()
    layout.topics_["views"] = 1
    logs.set("views", 0, 0, 7)
    d = _describe(layout, logs, topics=["views"])
    assert [(p.topic, p.partition, p.offset, p.log_end) for p in d.partitions] == [("views", 0, None, 7)]
    with pytest.raises(UnknownTopicError, match="'nope' does not exist"):
        _describe(layout, logs, topics=["nope"])


def test_wildcard_members_expect_matching_topics() -> None:
    layout = FakeLayout(topics_={"logs.a": 1, "logs.b": 1, "other": 1})
    logs = FakeLogOffsets()
    layout.members["w"] = {}
    layout.join("w", "w_c1", {"logs\\..*": 1}, pattern="white_list")
    d = _describe(layout, logs, "w")
    assert [(p.topic, p.status) for p in d.partitions] == [("logs.a", NO_OWNER), ("logs.b", NO_OWNER)]


def test_missing_group() -> None:
    with pytest.raises(GroupNotFoundError, match="'ghost' does not exist"):
        _describe(FakeLayout(), FakeLogOffsets(), "ghost")


def test_owned_partitions_without_a_commit_say_so_and_the_total_does_not_contradict_the_rows() -> None:
    """A live member's fenced nodes hold -1: no CURRENT-OFFSET, so no lag; the total must not read 0 as if
    nothing lagged, and the node's mtime is its owner's claim, not a commit."""
    layout, logs = _cluster()
    for p in range(3):
        layout.commit("etl", "clicks", p, None, age_ms=500)
    d = _describe(layout, logs)
    assert [(r.offset, r.lag, r.last_commit_ms, r.claimed_ms) for r in d.partitions] == [
        (None, None, None, NOW_MS - 500)] * 3
    assert d.unknown_lag == 3 and d.to_json()["partitions_without_lag"] == 3
    text = render_description(d)
    assert text.splitlines()[0].endswith("total lag unknown (3 owned partitions not committed yet)"), text
    assert text.count("not committed yet") == 4 and "total lag 0" not in text
    layout.commit("etl", "clicks", 0, 90)
    first = render_description(_describe(layout, logs)).splitlines()[0]
    assert first.endswith("total lag at least 10 (2 owned partitions not committed yet)"), first


def test_list_groups_includes_groups_without_members() -> None:
    layout, _ = _cluster()
    layout.commit("old", "views", 0, 3)
    layout.extra_groups.add("bad:name")  # another tool's node under /consumers
    summaries = {s.group: s for s in list_groups(layout)}  # type: ignore[arg-type]
    assert (summaries["etl"].members, summaries["etl"].topics, summaries["etl"].active) == (2, ["clicks"], True)
    assert (summaries["old"].members, summaries["old"].topics, summaries["old"].active) == (0, ["views"], False)
    assert summaries["bad:name"].members == 0


@pytest.mark.parametrize(("owner", "expected"), [
    (f"{A}-0", A), (f"{A}-12", A), ("etl_test-1-3", "etl_test-1"), ("pykafka:uuid", "pykafka:uuid"),
    ("etl_c1-x", "etl_c1-x")])
def test_consumer_id_of_owner(owner: str, expected: str) -> None:
    assert consumer_id_of_owner(owner) == expected


def test_owner_liveness_accepts_bare_ids() -> None:
    assert owner_is_live(f"{A}-1", [A]) and owner_is_live("meta_c1", ["meta_c1"])
    assert not owner_is_live(f"{B}-0", [A])


@pytest.mark.parametrize(("consumer_id", "host"), [
    (A, "host1"), ("etl_my-host.example.com-1700000000000-ab12", "my-host.example.com"),
    ("etl_configured", None), ("other_host-1700000000000-ab12", None)])
def test_host_of(consumer_id: str, host: str | None) -> None:
    assert host_of("etl", consumer_id) == host


# -- offsets in __consumer_offsets --------------------------------------------------------------------


def test_offsets_in_kafka_are_merged_with_their_source() -> None:
    layout, logs = _cluster()
    rows = {r.partition: r for r in _describe(layout, logs).partitions}
    kafka = FakeKafkaOffsets({"etl": {("clicks", 0): rows[0].offset + 5 if rows[0].offset is not None else 5,
                                      ("clicks", 2): 1}})
    merged = _describe(layout, logs, kafka=kafka)
    by_partition = {r.partition: r for r in merged.partitions}
    for p, row in by_partition.items():
        zk, in_kafka = rows[p].offset, kafka.offsets["etl"].get(("clicks", p))
        expected = max(o for o in (zk, in_kafka, -1) if o is not None)
        assert row.offset == (None if expected < 0 else expected)
        assert row.source == (None if zk is None and in_kafka is None else "kafka" if zk is None or (
            in_kafka is not None and in_kafka > zk) else "zookeeper" if in_kafka is None or zk > in_kafka else "both")
        assert row.to_json()["offset_source"] == row.source
    assert merged.kafka_note is None


def test_merged_offset() -> None:
    assert merged_offset(None, None) == (None, None)
    assert merged_offset(-1, None) == (None, None)  # a fence
    assert merged_offset(5, None) == (5, "zookeeper")
    assert merged_offset(-1, 3) == (3, "kafka")
    assert merged_offset(5, 7) == (7, "kafka")
    assert merged_offset(9, 7) == (9, "zookeeper")
    assert merged_offset(7, 7) == (7, "both")


def test_a_group_only_in_kafka_is_described() -> None:
    layout, logs = _cluster()
    kafka = FakeKafkaOffsets({"std": {("clicks", 1): 40}})
    d = _describe(layout, logs, "std", kafka=kafka)
    assert [(r.partition, r.offset, r.lag, r.source, r.status) for r in d.partitions] == [(1, 40, 61, "kafka", OK)]
    assert d.offsets_storage == "kafka" and not d.members
    with pytest.raises(GroupNotFoundError):
        _describe(layout, logs, "nope", kafka=kafka)


def test_an_unreachable_coordinator_leaves_kafka_out_with_a_note() -> None:
    layout, logs = _cluster()
    plain = _describe(layout, logs)
    down = _describe(layout, logs, kafka=FakeKafkaOffsets(down=True))
    assert down.partitions == plain.partitions and "unavailable" in (down.kafka_note or "")
    absent = _describe(layout, logs, kafka=FakeKafkaOffsets(topic_exists=False))
    assert absent.partitions == plain.partitions and absent.kafka_note is None  # nothing stored: not news
    assert absent.offsets_storage == "zookeeper"
