"""Reset plans as kafka-consumer-groups' CSV (--export / --from-file), and plans from such a file."""

from __future__ import annotations

import pytest

from metaq.admin.offset_reset import OffsetChange, ResetSpec, apply_plan, merge_plans, plan_reset
from metaq.admin.reset_csv import format_reset_csv, parse_reset_csv
from metaq.errors import ConfigError
from tests.admin.fakes import FakeLayout, FakeLogOffsets

CHANGES = [OffsetChange("etl", "clicks", 1, 5, 40), OffsetChange("etl", "clicks", 0, 5, 30),
           OffsetChange("etl", "clicks", 2, None, None, note="left unchanged"),
           OffsetChange("a,b", "views", 0, 1, 2)]


def test_format_is_kafkas_lines_without_a_header() -> None:
    one = [c for c in CHANGES if c.group == "etl"]
    assert format_reset_csv(one, with_group=False) == "clicks,0,30\nclicks,1,40\n"  # unchanged rows left out
    assert format_reset_csv(CHANGES, with_group=True) == '"a,b",views,0,2\netl,clicks,0,30\netl,clicks,1,40\n'


def test_parse_reads_what_format_writes() -> None:
    text = format_reset_csv([*CHANGES[:3], OffsetChange("ops", "views", 0, 1, 2)], with_group=True)
    assert parse_reset_csv(text + "\n", "plan.csv", group=None) == {
        "ops": {("views", 0): 2}, "etl": {("clicks", 0): 30, ("clicks", 1): 40}}
    single = format_reset_csv(CHANGES[:2], with_group=False)
    assert parse_reset_csv(single, "plan.csv", group="etl") == {"etl": {("clicks", 0): 30, ("clicks", 1): 40}}


@pytest.mark.parametrize(("text", "group", "message"), [
    ("clicks,0,30\n", None, "need exactly one --group"),
    ("clicks,0,30\nclicks,1\n", "etl", "plan.csv:2: expected TOPIC,PARTITION,NEW-OFFSET"),
    ("clicks,x,30\n", "etl", "plan.csv:1: partition 'x' must be an integer >= 0"),
    ("etl,clicks,0,-3\n", None, "plan.csv:1: offset '-3' must be an integer >= 0"),
    ("etl,bad/topic,0,3\n", None, "plan.csv:1:"),
    ("a,b\n", "etl", "expected GROUP,TOPIC,PARTITION,NEW-OFFSET"),
    ("\n\n", "etl", "holds no offsets"),
])
def test_parse_names_the_bad_line(text: str, group: str | None, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", "\\(")):
        parse_reset_csv(text, "plan.csv", group=group)


def test_a_plan_from_a_file_is_clamped_as_to_offset_and_applied() -> None:
    layout = FakeLayout(topics_={"clicks": 3})
    logs = FakeLogOffsets()
    for p in range(3):
        logs.set("clicks", p, 10, 100)
    layout.commit("etl", "clicks", 0, 50)
    layout.commit("ops", "clicks", 0, 60)
    requested = {("clicks", 0): 20, ("clicks", 2): 500}
    plan = plan_reset(layout, logs, "etl", {}, ResetSpec.to_current(),  # type: ignore[arg-type]
                      requested=requested)
    assert plan.action == "reset from file"
    assert [(c.partition, c.current, c.new, c.note) for c in plan.changes] == [
        (0, 50, 20, ""), (2, None, 100, "clamped to log end 100 (asked for 500)")]
    other = plan_reset(layout, logs, "ops", {"clicks": [0]}, ResetSpec.earliest())  # type: ignore[arg-type]
    merged = merge_plans([plan, other])
    assert merged.groups == ["etl", "ops"] and merged.action == "reset from file, reset to earliest"
    apply_plan(layout, merged)  # type: ignore[arg-type]
    assert layout.writes == [("etl", "clicks", 0, 20), ("etl", "clicks", 2, 100), ("ops", "clicks", 0, 10)]
