"""The pure part of ``metaq top``: rates and commit ages between samples, the rebalance log from member and
owner changes, protocol groups with and without DescribeGroups, and the frame the CLI draws."""

from __future__ import annotations

import io
import re
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse
from kafka.protocol.consumer import ConsumerProtocolAssignment
from rich.console import Console

from metaq.admin import protocol_groups
from metaq.admin.groups import OK, ORPHAN, GroupDescription, Member, PartitionLag
from metaq.admin.migration import MigrationView
from metaq.admin.protocol_groups import (
    NO_DESCRIBE_GROUPS,
    ProtocolGroup,
    ProtocolGroupReader,
    ProtocolMember,
    decode_assignment,
    describe_version,
    group_from_response,
)
from metaq.admin.watch import GroupWatch, Sample, moves_text, sample_group, short_id, to_json
from metaq.cli.top_screen import render
from metaq.client.request_codec import build_request
from metaq.errors import BrokerResponseError, GroupNotFoundError

T0 = 1_700_000_000_000
A = "g_host-1700000000000-aaaaaaaa"
B = "g_host-1700000000001-bbbbbbbb"


def lag(partition: int, offset: int | None, end: int, owner: str | None = None, *, status: str = OK,
        commit_ms: int | None = None, source: str = "zookeeper") -> PartitionLag:
    return PartitionLag("t", partition, offset, 0, end, owner, commit_ms, commit_ms, status, source)


def zk_sample(taken_s: float, rows: list[PartitionLag], members: list[str], claims: dict[int, int] | None = None,
              now_ms: int | None = None) -> Sample:
    description = GroupDescription("g", [Member(m, "host", {"t": 1}, "static", T0) for m in members], rows)
    return Sample(taken_s, T0 + int(taken_s * 1000) if now_ms is None else now_ms, description,
                  {("t", p): ms for p, ms in (claims or {}).items()})


def texts(view: Any) -> list[str]:
    return [e.text for e in view.log]


# -- rates, ages, members -------------------------------------------------------------------------------------


def test_rates_come_from_offset_growth_within_the_window_and_ages_from_the_commit_time() -> None:
    watch = GroupWatch("g", rate_window_s=10)
    first = watch.update(zk_sample(0, [lag(0, 100, 150, f"{A}-0", commit_ms=T0 - 4000),
                                       lag(1, None, 10, f"{A}-0")], [A], {0: T0 - 60000, 1: T0 - 60000}))
    assert [r.rate for r in first.partitions] == [None, None] and first.consume_rate is None
    assert [r.commit_age_ms for r in first.partitions] == [4000, None]
    assert [(m.member_id, m.owns) for m in first.members] == [(A, (("t", 0), ("t", 1)))]

    watch.update(zk_sample(4, [lag(0, 120, 190, f"{A}-0", commit_ms=T0 + 3000), lag(1, None, 10, f"{A}-0")], [A],
                           {0: T0 - 60000, 1: T0 - 60000}))
    view = watch.update(zk_sample(8, [lag(0, 180, 250, f"{A}-0", commit_ms=T0 + 7000), lag(1, None, 10, f"{A}-0")],
                                  [A], {0: T0 - 60000, 1: T0 - 60000}))
    assert view.partitions[0].rate == pytest.approx(80 / 8)  # against the oldest sample in the 10 s window
    assert view.consume_rate == pytest.approx(10) and view.produce_rate == pytest.approx(100 / 8)
    assert view.partitions[0].commit_age_ms == 1000 and view.total_lag == 70
    later = watch.update(zk_sample(13, [lag(0, 230, 250, f"{A}-0", commit_ms=T0 + 12000),
                                        lag(1, None, 10, f"{A}-0")], [A], {0: T0 - 60000, 1: T0 - 60000}))
    assert later.partitions[0].rate == pytest.approx(110 / 9)  # the sample at 0 s left the window
    assert texts(later) == ["last rebalance: 2 partition(s) claimed by 1 member(s)",
                            "watching g (zookeeper group): 1 member, 2 partition(s)"]


def test_a_rewound_offset_has_no_rate() -> None:
    watch = GroupWatch("g")
    watch.update(zk_sample(0, [lag(0, 100, 150)], []))
    assert watch.update(zk_sample(2, [lag(0, 10, 150)], [])).partitions[0].rate is None


def test_kafka_stored_offsets_age_from_when_top_saw_them_move() -> None:
    watch = GroupWatch("g")
    view = watch.update(zk_sample(0, [lag(0, 5, 9, source="kafka")], []))
    assert view.partitions[0].commit_age_ms is None
    watch.update(zk_sample(2, [lag(0, 7, 9, source="kafka")], []))
    view = watch.update(zk_sample(5, [lag(0, 7, 9, source="kafka")], []))
    assert (view.partitions[0].commit_age_ms, view.partitions[0].commit_observed) == (3000, True)


# -- the rebalance log -----------------------------------------------------------------------------------------


def test_joins_moves_reclaims_leaves_and_orphans_are_logged() -> None:
    watch = GroupWatch("g")
    watch.update(zk_sample(0, [lag(0, 1, 1, f"{A}-0"), lag(1, 1, 1, f"{A}-0")], [A], {0: T0, 1: T0}))
    joined = watch.update(zk_sample(1, [lag(0, 1, 1, f"{A}-0"), lag(1, 1, 1, f"{B}-0")], [A, B],
                                    {0: T0 + 900, 1: T0 + 900}))
    assert texts(joined)[-2:] == [f"joined: {short_id('g', B)}",
                                  "rebalance: t/0 re-claimed by host-1700000000000-aaaaaaaa; "
                                  "t/1 host-1700000000000-aaaaaaaa -> host-1700000000001-bbbbbbbb"]
    assert joined.log[-2].time_ms == T0  # when it registered
    quiet = watch.update(zk_sample(2, [lag(0, 1, 1, f"{A}-0"), lag(1, 1, 1, f"{B}-0")], [A, B],
                                   {0: T0 + 900, 1: T0 + 900}))
    assert len(quiet.log) == len(joined.log)  # nothing changed, nothing logged
    orphaned = watch.update(zk_sample(3, [lag(0, 1, 1, f"{A}-0"), lag(1, 1, 1, f"{B}-0", status=ORPHAN)], [A],
                                      {0: T0 + 900, 1: T0 + 900}))
    assert texts(orphaned)[len(joined.log):] == [
        "left: host-1700000000001-bbbbbbbb",
        "orphan: t/1 owned by host-1700000000001-bbbbbbbb-0, which is not a live member"]
    assert [r.lag.status for r in orphaned.orphans] == [ORPHAN] and orphaned.members[0].owns == (("t", 0),)


def test_moves_text_groups_partitions_by_old_and_new_owner() -> None:
    moves = [(("t", p), "a", "b") for p in range(10)] + [(("t", 11), None, "a"), (("t", 12), "a", "a"),
                                                         (("t", 13), "b", None)]
    assert moves_text(moves, lambda o: o or "-") == ("t/0,t/1,t/2,t/3,t/4,t/5,t/6,t/7 (+2 more) a -> b; t/11 - -> a; "
                                                     "t/12 re-claimed by a; t/13 b -> -")


def test_a_failed_refresh_keeps_the_last_view_and_logs_once() -> None:
    watch = GroupWatch("g")
    assert watch.failed("ZooKeeper is gone", T0) is None
    watch.update(zk_sample(0, [lag(0, 1, 1)], []))
    first = watch.failed("ZooKeeper is gone", T0 + 1)
    again = watch.failed("ZooKeeper is gone", T0 + 2)
    assert first is not None and again is not None and again.error == "ZooKeeper is gone"
    assert texts(again).count("refresh failed: ZooKeeper is gone") == 1 and again.partitions == first.partitions


# -- protocol groups -------------------------------------------------------------------------------------------


def protocol_sample(taken_s: float, group: ProtocolGroup) -> Sample:
    description = GroupDescription("stdg", [], [lag(0, 15, 20, source="kafka"), lag(1, 12, 20, source="kafka")],
                                   "kafka")
    return Sample(taken_s, T0 + int(taken_s * 1000), description, protocol=group)


def test_protocol_group_members_are_unknown_without_describe_groups_and_light_up_with_it() -> None:
    watch = GroupWatch("stdg")
    unknown = watch.update(protocol_sample(0, ProtocolGroup.unknown(NO_DESCRIBE_GROUPS)))
    assert unknown.members is None and unknown.member_note == NO_DESCRIBE_GROUPS and unknown.kind == "protocol"
    assert [r.owner for r in unknown.partitions] == [None, None] and unknown.total_lag == 13
    assert to_json(unknown)["members"] is None and to_json(unknown)["total_lag"] == 13

    members = (ProtocolMember("rdkafka-1", "rdkafka", "/127.0.0.1", (("t", 0),)),
               ProtocolMember("rdkafka-2", "rdkafka", "/127.0.0.1", (("t", 1),)))
    known = watch.update(protocol_sample(1, ProtocolGroup("Stable", members)))
    assert [(m.member_id, m.owns) for m in known.members] == [("rdkafka-1", (("t", 0),)), ("rdkafka-2", (("t", 1),))]
    assert [r.owner for r in known.partitions] == ["rdkafka-1", "rdkafka-2"]
    assert texts(known)[-2:] == ["members known: 2", "rebalance: t/0 - -> rdkafka-1; t/1 - -> rdkafka-2"]


def test_sample_group_asks_the_coordinator_only_for_groups_without_a_zookeeper_node() -> None:
    asked: list[str] = []

    class Source:
        def __init__(self, exists: bool) -> None:
            self.exists = exists

        def describe(self, group: str) -> GroupDescription:
            return GroupDescription(group, [], [lag(0, 1, 2, f"{A}-0")])

        def group_exists(self, group: str) -> bool:
            return self.exists

        def claims(self, group: str) -> dict[tuple[str, int], int]:
            return {("t", 0): T0}

        def protocol_group(self, group: str) -> ProtocolGroup:
            asked.append(group)
            return ProtocolGroup.unknown(NO_DESCRIBE_GROUPS)

    class Missing(Source):
        def __init__(self, members: tuple[ProtocolMember, ...] | None) -> None:
            super().__init__(False)
            self.members = members

        def describe(self, group: str) -> GroupDescription:
            raise GroupNotFoundError(f"group {group!r} does not exist")

        def protocol_group(self, group: str) -> ProtocolGroup:
            return ProtocolGroup("Dead" if self.members == () else None, self.members)

    for members in (None, ()):  # no DescribeGroups, or the coordinator does not know the group either
        with pytest.raises(GroupNotFoundError):
            sample_group(Missing(members), "g", taken_s=0, now_ms=T0)
    joining = (ProtocolMember("m-1", "c", "/h", (("t", 0),)),)  # a protocol group that has not committed yet
    uncommitted = sample_group(Missing(joining), "g", taken_s=0, now_ms=T0)
    assert (uncommitted.kind, uncommitted.owners(), uncommitted.description.partitions) == (
        "protocol", {("t", 0): "m-1"}, [])

    zk = sample_group(Source(True), "g", taken_s=0, now_ms=T0)
    assert (zk.kind, zk.claims, asked) == ("zookeeper", {("t", 0): T0}, [])
    protocol = sample_group(Source(False), "g", taken_s=0, now_ms=T0)
    assert (protocol.kind, asked, protocol.members()) == ("protocol", ["g"], None)


def assignment_bytes(*pairs: tuple[str, list[int]]) -> bytes:
    value = ConsumerProtocolAssignment(
        version=0, assigned_partitions=[ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=ps)
                                        for t, ps in pairs], user_data=None)
    return bytes(value.encode(version=0))


def describe_response(error_code: int = 0, protocol_type: str = "consumer") -> Any:
    return build_request(DescribeGroupsResponse, 3, {"throttle_time_ms": 0, "groups": [{
        "error_code": error_code, "group_id": "stdg", "group_state": "Stable", "protocol_type": protocol_type,
        "protocol_data": "range", "members": [
            {"member_id": "m-2", "client_id": "c", "client_host": "/10.0.0.2", "member_metadata": b"",
             "member_assignment": assignment_bytes(("t", [1]))},
            {"member_id": "m-1", "client_id": "c", "client_host": "/10.0.0.1", "member_metadata": b"",
             "member_assignment": assignment_bytes(("t", [2, 0]), ("u", [0]))}]}]})


def test_describe_groups_answers_are_decoded() -> None:
    group = group_from_response(describe_response(), "stdg")
    assert group.state == "Stable" and group.note is None
    assert [(m.member_id, m.host, m.assignment) for m in group.members] == [
        ("m-1", "/10.0.0.1", (("t", 0), ("t", 2), ("u", 0))), ("m-2", "/10.0.0.2", (("t", 1),))]
    assert all(m.assignment == () for m in group_from_response(describe_response(protocol_type="connect"),
                                                               "stdg").members)
    with pytest.raises(BrokerResponseError, match="DescribeGroups for group 'stdg': error 15"):
        group_from_response(describe_response(error_code=15), "stdg")
    assert decode_assignment(b"\x00\x00\xff") == () and decode_assignment(b"") == ()


def test_the_describe_groups_version_is_one_metaq_decodes() -> None:
    assert describe_version({}) is None and describe_version({15: (5, 6)}) is None
    assert describe_version({15: (0, 5)}) == 4 and describe_version({15: (0, 2)}) == 2


def test_the_reader_asks_the_coordinator_when_it_offers_describe_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[Any] = []

    class Channel:
        versions: dict[int, tuple[int, int]] = {}

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.closed = False

        def connection(self) -> Any:
            def send(request_class: Any, request: Any) -> Any:
                sent.append(request)
                return describe_response()
            return SimpleNamespace(broker_versions=Channel.versions, send=send)

        def close(self) -> None:
            self.closed = True

    monkeypatch.setattr(protocol_groups, "OffsetsChannel", Channel)
    topics: dict[str, Any] = {}
    reader = ProtocolGroupReader(SimpleNamespace(topic_assignment=topics.get))  # type: ignore[arg-type]
    assert reader.describe("stdg").note == "unknown (no __consumer_offsets topic: no group has used a coordinator)"
    topics["__consumer_offsets"] = object()
    assert reader.describe("stdg") == ProtocolGroup.unknown(NO_DESCRIBE_GROUPS) and sent == []
    Channel.versions = {15: (0, 5)}
    described = reader.describe("stdg")
    assert [m.member_id for m in described.members] == ["m-1", "m-2"]
    [request] = sent
    assert isinstance(request, DescribeGroupsRequest) and request.API_VERSION == 4 and request.groups == ["stdg"]


# -- the frame -------------------------------------------------------------------------------------------------


def frame(view: Any, height: int | None = None, now_ms: int | None = None) -> str:
    console = Console(width=160, record=True, file=io.StringIO())
    console.print(render(view, interval=2.0, height=height, now_ms=now_ms))
    return console.export_text()


def test_the_frame_shows_members_rows_bars_ages_and_the_log() -> None:
    watch = GroupWatch("g")
    watch.update(zk_sample(0, [lag(p, 10, 20 * (p + 1), f"{A}-0", commit_ms=T0 - 65000) for p in range(3)], [A]))
    view = watch.update(zk_sample(2, [lag(p, 12, 20 * (p + 1), f"{A}-0", commit_ms=T0 - 65000) for p in range(3)],
                                  [A]))
    text = frame(view)
    assert "metaq top · g · ZooKeeper group" in text and "every 2s · q quit" in text
    assert "members 1 · partitions 3 · total lag 84 · consuming 3.0/s · producing 0.0/s · orphans 0" in text
    assert f"{A}  host  t:0,1,2" in " ".join(text.split("\n")).replace("    ", "  ")
    rows = [line.split() for line in text.splitlines() if line.split()[:1] == ["t"]]
    assert [r[:6] for r in rows] == [["t", str(p), "host-1700000000000-aaaaaaaa-0", "12", str(20 * (p + 1)),
                                      str(20 * (p + 1) - 12)] for p in range(3)]
    assert [len(r[6]) for r in rows] == [3, 12, 20]  # bars scaled to the largest lag
    assert [r[7:] for r in rows] == [["1.0", "1m07s", "OK"]] * 3
    redrawn = frame(view, now_ms=view.sampled_ms + 3500)  # between refreshes the ages move on
    assert [line.split()[8] for line in redrawn.splitlines() if line.split()[:1] == ["t"]] == ["1m10s"] * 3
    assert "watching g (zookeeper group): 1 member, 3 partition(s)" in text



def test_a_live_frame_fits_the_terminal_height() -> None:
    watch = GroupWatch("g")
    view = watch.update(zk_sample(0, [lag(p, 1, 2, f"{A}-0") for p in range(20)], [A]))
    for i in range(12):
        view = watch.failed(f"error {i} " + "x" * 200, T0 + i) or view
    # 2+1 header lines (one for the error), 3 for the member, 2 for the partition title and header, 1 for the
    # log's title: in 24 lines, 8 log entries (each one line) and 7 partition lines (6 rows and "… more")
    text = frame(view, height=24)
    lines = text.rstrip("\n").splitlines()
    assert len(lines) == 24
    assert [line.split()[1] for line in lines if line.split()[:1] == ["t"]] == ["0", "1", "2", "3", "4", "5"]
    assert "… 14 more (enlarge the terminal)" in text and lines[-1].split()[1:4] == ["refresh", "failed:", "error"]
    assert lines[-1].split()[4] == "11" and lines[-1].rstrip().endswith("…")
    # with room to spare, the log shows all 13 entries
    tall = frame(view, height=60).rstrip("\n").splitlines()
    assert len(tall) == 2 + 1 + 3 + 2 + 20 + 1 + 13 and "watching g" in "\n".join(tall)


def test_log_times_are_whole_however_long_the_event() -> None:
    """The rebalance log's time column keeps its eight characters at 160 columns: a long event is cut, not
    the time (once shown as ``00…``)."""
    watch = GroupWatch("g")
    view = watch.update(zk_sample(0, [lag(0, 1, 2, f"{A}-0")], [A]))
    view = watch.failed("error " + "x" * 300, T0 + 1) or view
    lines = frame(view, height=24).rstrip("\n").splitlines()
    log_lines = lines[lines.index(next(line for line in lines if line.startswith("Rebalance log"))) + 1:]
    assert log_lines and all(re.match(r" ?\d\d:\d\d:\d\d ", line) for line in log_lines), log_lines


def test_the_frame_of_a_protocol_group_says_members_are_unknown() -> None:
    view = GroupWatch("stdg").update(protocol_sample(0, ProtocolGroup.unknown(NO_DESCRIBE_GROUPS)))
    text = frame(view)
    assert "protocol group (broker coordinator)" in text and "members unknown (no DescribeGroups)" in text
    assert "MEMBER" not in text and "total lag 13" in text


def test_a_live_migration_shows_in_the_header() -> None:
    """metaq top shows what `groups describe` shows of a migration: the marker and each member's mode."""
    watch = GroupWatch("g")
    sample = zk_sample(0, [lag(0, 10, 20, f"{A}-0")], [A])
    migrating = replace(sample.description, migration=MigrationView("kafka", 2, "MIGRATING", False, {A: "bridge"}))
    view = watch.update(replace(sample, description=migrating))
    assert view.notes == [f"Migration to kafka (epoch 2, all at once): MIGRATING; member modes: {A} bridge"]
    out = io.StringIO()
    Console(file=out, width=200).print(render(view, interval=None))
    assert "MIGRATING; member modes" in out.getvalue()
