"""offsets reset: every mode, clamping with a note, selection, and the live-member refusal."""

from __future__ import annotations

import datetime as dt

import pytest

from metaq.admin.log_offsets import Watermarks
from metaq.admin.offset_reset import (
    ResetSpec,
    apply_plan,
    parse_datetime,
    parse_duration_ms,
    parse_topic_selection,
    plan_reset,
    target_offset,
)
from metaq.admin.timefmt import format_ms
from metaq.errors import ConfigError, GroupActiveError, GroupNotFoundError, MetaqError, UnknownTopicError
from tests.admin.fakes import FakeKafkaOffsets, FakeLayout, FakeLogOffsets

MARKS = Watermarks(100, 500, 0)


@pytest.mark.parametrize(("spec", "current", "expected"), [
    (ResetSpec.earliest(), 300, (100, "")),
    (ResetSpec.latest(), 300, (500, "")),
    (ResetSpec.to_offset(250), None, (250, "")),
    (ResetSpec.to_offset(5), 300, (100, "clamped to log start 100 (asked for 5)")),
    (ResetSpec.to_offset(900), 300, (500, "clamped to log end 500 (asked for 900)")),
    (ResetSpec.shift_by(-50), 300, (250, "")),
    (ResetSpec.shift_by(-250), 300, (100, "clamped to log start 100 (asked for 50)")),
    (ResetSpec.shift_by(1000), 300, (500, "clamped to log end 500 (asked for 1300)")),
    (ResetSpec.shift_by(10), None, (None, "no committed offset to shift; left unchanged")),
    (ResetSpec.to_current(), 300, (300, "")),
    (ResetSpec.to_current(), None, (500, "no committed offset: the log end")),  # as kafka-consumer-groups
])
def test_target_offset(spec: ResetSpec, current: int | None, expected: tuple[int | None, str]) -> None:
    assert target_offset(spec, current, MARKS) == expected


def test_target_offset_by_time_falls_back_to_log_end() -> None:
    spec = ResetSpec(mode="datetime", value=0)
    assert target_offset(spec, 300, MARKS, by_time=420) == (420, "")
    assert target_offset(spec, 300, MARKS, by_time=None) == (500, "")


def test_parse_datetime() -> None:
    assert parse_datetime("2024-05-01T12:00:00Z") == 1714564800000
    assert parse_datetime("2024-05-01T14:00:00.250+02:00") == 1714564800250
    naive = dt.datetime(2024, 5, 1, 12, 0)
    assert parse_datetime("2024-05-01T12:00") == int(naive.astimezone().timestamp() * 1000)  # local time
    with pytest.raises(ConfigError, match="ISO 8601"):
        parse_datetime("yesterday")
    assert format_ms(1714564800250) == "2024-05-01T12:00:00.250Z"
    assert ResetSpec.to_datetime("2024-05-01T12:00:00Z").describe() == "reset to 2024-05-01T12:00:00.000Z"


def test_parse_topic_selection() -> None:
    assert parse_topic_selection("clicks") == ("clicks", None)
    assert parse_topic_selection("clicks:2,0,2") == ("clicks", [0, 2])
    for bad in ("clicks:", "clicks:x", "clicks:-1", "bad/topic"):
        with pytest.raises(ConfigError):
            parse_topic_selection(bad)
    with pytest.raises(ConfigError):
        ResetSpec.to_offset(-1)


def _cluster() -> tuple[FakeLayout, FakeLogOffsets]:
    layout = FakeLayout(topics_={"clicks": 3})
    logs = FakeLogOffsets()
    for p in range(3):
        logs.set("clicks", p, 10, 100)
    layout.commit("etl", "clicks", 0, 50)
    layout.commit("etl", "clicks", 1, None)
    return layout, logs


def test_plan_then_apply() -> None:
    layout, logs = _cluster()
    plan = plan_reset(layout, logs, "etl", {"clicks": None}, ResetSpec.shift_by(-45))  # type: ignore[arg-type]
    assert [(c.partition, c.current, c.new, c.note) for c in plan.changes] == [
        (0, 50, 10, "clamped to log start 10 (asked for 5)"),
        (1, None, None, "no committed offset to shift; left unchanged"),
        (2, None, None, "no committed offset to shift; left unchanged")]
    assert layout.writes == []  # planning writes nothing
    done = []
    written = apply_plan(layout, plan, progress=done.append)  # type: ignore[arg-type]
    assert [(c.partition, c.new) for c in written] == [(0, 10)] and done == [1]
    assert layout.writes == [("etl", "clicks", 0, 10)]
    assert plan.to_json()["changes"][0]["log_start_offset"] == 10


def test_apply_refuses_while_members_are_live_unless_forced() -> None:
    layout, logs = _cluster()
    plan = plan_reset(layout, logs, "etl", {"clicks": [0]}, ResetSpec.latest())  # type: ignore[arg-type]
    layout.join("etl", "etl_c1", {"clicks": 1})  # joined after the plan: checked again at apply time
    with pytest.raises(GroupActiveError, match="1 live member \\(etl_c1\\); stop them first, or use --force"):
        apply_plan(layout, plan)  # type: ignore[arg-type]
    assert layout.writes == []
    apply_plan(layout, plan, force=True)  # type: ignore[arg-type]
    assert layout.writes == [("etl", "clicks", 0, 100)]


def test_to_datetime_asks_the_leaders() -> None:
    layout, logs = _cluster()
    logs.by_time[("clicks", 0)] = 42
    spec = ResetSpec.to_datetime("2024-05-01T12:00:00Z")
    plan = plan_reset(layout, logs, "etl", {"clicks": [0, 2]}, spec)  # type: ignore[arg-type]
    assert logs.asked_times == [1714564800000]
    assert [(c.partition, c.new) for c in plan.changes] == [(0, 42), (2, 100)]


@pytest.mark.parametrize(("text", "ms"), [
    ("PT10M", 600_000), ("pt1h", 3_600_000), ("P1DT2H30M", 95_400_000), ("PT0.5S", 500), ("P2D", 172_800_000)])
def test_by_duration_is_a_time_reset_to_now_minus_the_duration(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms
    assert ResetSpec.by_duration(text, now_ms=1_714_564_800_000) == ResetSpec("datetime", 1_714_564_800_000 - ms)


@pytest.mark.parametrize("text", ["10m", "PT", "P", "-PT10M", "PT10X", ""])
def test_by_duration_refuses_what_is_no_duration(text: str) -> None:
    with pytest.raises(ConfigError, match="--by-duration"):
        parse_duration_ms(text)


def test_plan_errors() -> None:
    layout, logs = _cluster()
    with pytest.raises(GroupNotFoundError):
        plan_reset(layout, logs, "new", {"clicks": None}, ResetSpec.latest())  # type: ignore[arg-type]
    plan = plan_reset(layout, logs, "new", {"clicks": [1]}, ResetSpec.latest(),  # type: ignore[arg-type]
                      create_group=True)
    assert [(c.group, c.new) for c in plan.changes] == [("new", 100)]
    with pytest.raises(UnknownTopicError, match="'nope' does not exist"):
        plan_reset(layout, logs, "etl", {"nope": None}, ResetSpec.latest())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="partitions 0..2; 7 does not exist"):
        plan_reset(layout, logs, "etl", {"clicks": [7]}, ResetSpec.latest())  # type: ignore[arg-type]
    del logs.marks[("clicks", 2)]
    with pytest.raises(MetaqError, match="log offsets of clicks-2 are unknown \\(no leader\\)"):
        plan_reset(layout, logs, "etl", {"clicks": None}, ResetSpec.earliest())  # type: ignore[arg-type]


# -- offsets in __consumer_offsets --------------------------------------------------------------------


def test_a_group_with_kafka_offsets_is_reset_there_first() -> None:
    layout, logs = _cluster()
    kafka = FakeKafkaOffsets({"etl": {("clicks", 0): 70, ("clicks", 2): 30}})
    plan = plan_reset(layout, logs, "etl", {"clicks": None}, ResetSpec.shift_by(-5),  # type: ignore[arg-type]
                      kafka=kafka)
    assert [(c.partition, c.current, c.new) for c in plan.changes] == [(0, 70, 65), (1, None, None), (2, 30, 25)]
    groups: list[str] = []
    apply_plan(layout, plan, kafka=kafka, kafka_groups=groups)  # type: ignore[arg-type]
    assert kafka.commits == [("etl", {("clicks", 0): 65, ("clicks", 2): 25})] and groups == ["etl"]
    assert layout.writes == [("etl", "clicks", 0, 65), ("etl", "clicks", 2, 25)]

    only_kafka = plan_reset(layout, logs, "std", {"clicks": [0]}, ResetSpec.earliest(),  # type: ignore[arg-type]
                            kafka=FakeKafkaOffsets({"std": {("clicks", 0): 90}}))
    assert [(c.current, c.new) for c in only_kafka.changes] == [(90, 10)]  # no --create-group needed


def test_a_group_without_kafka_offsets_is_written_to_zookeeper_only() -> None:
    layout, logs = _cluster()
    kafka = FakeKafkaOffsets({"other": {("clicks", 0): 1}})
    plan = plan_reset(layout, logs, "etl", {"clicks": [0]}, ResetSpec.latest(), kafka=kafka)  # type: ignore[arg-type]
    groups: list[str] = []
    apply_plan(layout, plan, kafka=kafka, kafka_groups=groups)  # type: ignore[arg-type]
    assert kafka.commits == [] and groups == [] and layout.writes == [("etl", "clicks", 0, 100)]
    with pytest.raises(MetaqError, match="unavailable"):
        apply_plan(layout, plan, kafka=FakeKafkaOffsets(down=True))  # type: ignore[arg-type]


@pytest.mark.parametrize(("code", "error", "message"), [
    (25, GroupActiveError, "group 'etl' has live members in the Kafka group protocol.*UNKNOWN_MEMBER_ID"),
    (22, GroupActiveError, "group 'etl' has live members.*ILLEGAL_GENERATION"),
    (58, MetaqError, "coordinator of group 'etl' refused the new offsets of 1 partition"),
])
def test_a_refused_kafka_commit_fails_before_zookeeper(code: int, error: type[Exception], message: str) -> None:
    layout, logs = _cluster()
    kafka = FakeKafkaOffsets({"etl": {("clicks", 0): 70}}, refuse={"etl": code})
    plan = plan_reset(layout, logs, "etl", {"clicks": [0]}, ResetSpec.earliest(), kafka=kafka)  # type: ignore[arg-type]
    with pytest.raises(error, match=message):
        apply_plan(layout, plan, force=True, kafka=kafka)  # type: ignore[arg-type]
    assert layout.writes == []


def test_all_topics_resets_every_topic_the_group_has_offsets_for() -> None:
    """kafka-consumer-groups --all-topics: the topics of the group's committed offsets (ZooKeeper and
    __consumer_offsets), every partition of each; a topic without offsets of the group is left out."""
    layout, logs = _cluster()
    layout.topics_["views"] = 1
    layout.topics_["other"] = 1
    logs.set("views", 0, 0, 40)
    logs.set("other", 0, 0, 40)
    kafka = FakeKafkaOffsets({"etl": {("views", 0): 7}})
    plan = plan_reset(layout, logs, "etl", {}, ResetSpec.latest(), kafka=kafka,  # type: ignore[arg-type]
                      all_topics=True)
    assert sorted({c.topic for c in plan.changes}) == ["clicks", "views"]
    assert len([c for c in plan.changes if c.topic == "clicks"]) == 3
    with pytest.raises(ConfigError, match="no committed offsets"):
        plan_reset(FakeLayout({"clicks": 1}, extra_groups={"new"}), logs, "new", {},  # type: ignore[arg-type]
                   ResetSpec.latest(), all_topics=True)
