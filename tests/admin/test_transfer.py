"""offsets export/import: Kafka's ExportZkOffsets lines and JSON, strict parsing, and import plans."""

from __future__ import annotations

import json

import pytest

from metaq.admin.offset_reset import apply_plan
from metaq.admin.transfer import (
    OffsetRecord,
    export_offsets,
    format_json,
    format_lines,
    format_offsets,
    parse_json,
    parse_lines,
    parse_offsets,
    plan_import,
)
from metaq.errors import ConfigError, GroupActiveError, GroupNotFoundError, MetaqError
from tests.admin.fakes import FakeKafkaOffsets, FakeLayout, FakeLogOffsets

RECORDS = [OffsetRecord("etl", "clicks", 0, 4213), OffsetRecord("etl", "clicks", 10, 7),
           OffsetRecord("etl.v2", "page-views", 1, 0)]


def test_line_format_is_kafkas() -> None:
    text = format_lines(RECORDS)
    assert text.splitlines()[0] == "/consumers/etl/offsets/clicks/0:4213"
    assert parse_lines(text) == sorted(RECORDS)
    assert parse_offsets("# saved\n\n" + text) == sorted(RECORDS)


def test_json_format_round_trip() -> None:
    text = format_json(RECORDS)
    doc = json.loads(text)
    assert doc["version"] == 1 and doc["offsets"][0] == {"group": "etl", "topic": "clicks", "partition": 0,
                                                         "offset": 4213}
    assert parse_offsets(text) == sorted(RECORDS)  # recognised as JSON
    assert parse_json(json.dumps(doc["offsets"])) == sorted(RECORDS)  # a bare list works too
    assert format_offsets(RECORDS, "json") == text
    with pytest.raises(ConfigError, match="format 'csv'"):
        format_offsets(RECORDS, "csv")


@pytest.mark.parametrize(("text", "message"), [
    ("/consumers/g/offsets/t/0 4213", "f:1: expected <offset node path>:<offset>"),
    ("/consumers/g/owners/t/0:1", "f:1: '/consumers/g/owners/t/0' is not an offset node path"),
    ("\n/consumers/g/offsets/t/0:-5", "f:2: offset '-5' must be an integer >= 0"),
    ("/consumers/g/offsets/t/0:12x", "f:1: offset '12x'"),
    ("/consumers/g/offsets/t/0:1\n/consumers/g/offsets/t/0:2", "t-0 is given twice \\(1 and 2\\)"),
])
def test_bad_lines_name_the_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_lines(text, "f")


@pytest.mark.parametrize(("doc", "message"), [
    ("{", "not valid JSON"),
    ('{"version": 2, "offsets": []}', "unsupported version 2"),
    ('{"offsets": [{"group": "g", "topic": "t", "partition": 0}]}', "offsets\\[0\\]: missing 'offset'"),
    ('{"offsets": [{"group": "g/x", "topic": "t", "partition": 0, "offset": 1}]}', "offsets\\[0\\]: config"),
    ('{"offsets": [{"group": "g", "topic": "t", "partition": true, "offset": 1}]}', "partition True"),
    ('{"offsets": [7]}', "expected an object"),
])
def test_bad_json_is_rejected(doc: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_json(doc, "f")


def test_export_skips_fenced_nodes_and_checks_named_groups() -> None:
    layout = FakeLayout(topics_={"clicks": 2})
    layout.commit("etl", "clicks", 0, 5)
    layout.commit("etl", "clicks", 1, None)  # -1: a fence, not an offset
    layout.commit("other", "clicks", 0, 9)
    layout.extra_groups.add("bad:name")
    progress: list[int] = []
    assert export_offsets(layout, progress=progress.append) == [  # type: ignore[arg-type]
        OffsetRecord("etl", "clicks", 0, 5), OffsetRecord("other", "clicks", 0, 9)]
    assert export_offsets(layout, ["other"]) == [OffsetRecord("other", "clicks", 0, 9)]  # type: ignore[arg-type]
    with pytest.raises(GroupNotFoundError):
        export_offsets(layout, ["ghost"])  # type: ignore[arg-type]


def test_export_covers_broker_coordinated_groups() -> None:
    """A group that only the brokers know (offsets in __consumer_offsets, no /consumers node) is exported like
    a ZooKeeper group, by name or with every group; a group with both takes max(zookeeper, kafka)."""
    layout = FakeLayout(topics_={"clicks": 2})
    layout.commit("zk", "clicks", 0, 5)
    layout.commit("both", "clicks", 0, 4)
    kafka = FakeKafkaOffsets({"stdg": {("clicks", 0): 7, ("clicks", 1): 8}, "both": {("clicks", 0): 6}})
    assert export_offsets(layout, ["stdg"], kafka=kafka) == [  # type: ignore[arg-type]
        OffsetRecord("stdg", "clicks", 0, 7), OffsetRecord("stdg", "clicks", 1, 8)]
    assert export_offsets(layout, kafka=kafka, kafka_groups=["stdg"]) == [  # type: ignore[arg-type]
        OffsetRecord("both", "clicks", 0, 6), OffsetRecord("stdg", "clicks", 0, 7),
        OffsetRecord("stdg", "clicks", 1, 8), OffsetRecord("zk", "clicks", 0, 5)]
    with pytest.raises(GroupNotFoundError, match="no offsets in __consumer_offsets"):
        export_offsets(layout, ["ghost"], kafka=kafka)  # type: ignore[arg-type]


def test_import_plan_notes_and_apply() -> None:
    layout = FakeLayout(topics_={"clicks": 2})
    logs = FakeLogOffsets()
    logs.set("clicks", 0, 0, 100)
    logs.set("clicks", 1, 50, 60)
    layout.commit("etl", "clicks", 0, 70)
    records = [OffsetRecord("etl", "clicks", 0, 10), OffsetRecord("etl", "clicks", 1, 5),
               OffsetRecord("etl", "gone", 0, 3)]
    plan = plan_import(layout, records, logs)  # type: ignore[arg-type]
    assert [(c.topic, c.partition, c.current, c.new, c.note) for c in plan.changes] == [
        ("clicks", 0, 70, 10, ""),
        ("clicks", 1, None, 5, "outside the log [50, 60]: members will apply auto.offset.reset"),
        ("gone", 0, None, 3, "topic does not exist")]
    layout.join("etl", "etl_c1", {"clicks": 1})
    with pytest.raises(GroupActiveError):
        apply_plan(layout, plan)  # type: ignore[arg-type]
    del layout.members["etl"]
    apply_plan(layout, plan)  # type: ignore[arg-type]
    assert layout.writes == [("etl", "clicks", 0, 10), ("etl", "clicks", 1, 5), ("etl", "gone", 0, 3)]
    with pytest.raises(MetaqError, match="nothing to import"):
        plan_import(layout, [])  # type: ignore[arg-type]
