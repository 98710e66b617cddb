"""Exporting and importing committed offsets, in Kafka's ExportZkOffsets line format or in JSON.

    records = export_offsets(layout, ["etl"])             # [OffsetRecord("etl", "clicks", 0, 4213), ...]
    text = format_lines(records)                          # "/consumers/etl/offsets/clicks/0:4213\\n..."
    plan = plan_import(layout, parse_offsets(text))       # an OffsetPlan, applied with apply_plan

Line format: one ``<offset node path>:<offset>`` per line, paths relative to the chroot, exactly what
Kafka's ExportZkOffsets writes and ImportZkOffsets reads (parsed here with ``rsplit(":", 1)``). JSON:
``{"version": 1, "offsets": [{"group": ..., "topic": ..., "partition": ..., "offset": ...}]}``.

Nodes holding ``-1`` (fenced by a member before its first commit) carry no offset and are not exported.
Unlike ImportZkOffsets, an import is validated line by line before anything is written, and it is
refused while a target group has live members unless forced.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from metaq.admin.groups import merged_offset, read_kafka_offsets
from metaq.admin.log_offsets import LogOffsets, Watermarks
from metaq.admin.offset_reset import OffsetChange, OffsetPlan, Progress, join_notes, kafka_offsets_of, zookeeper_offset
from metaq.client.group_offsets import GroupOffsetsStore
from metaq.errors import ConfigError, GroupNotFoundError, MetaqError
from metaq.json_types import JsonObject, JsonValue
from zk_layout import ZkLayout, parse_offset_path, paths, validate_group, validate_topic

LINES = "lines"
JSON = "json"
FORMATS = (LINES, JSON)
JSON_VERSION = 1


@dataclass(frozen=True, order=True)
class OffsetRecord:
    group: str
    topic: str
    partition: int
    offset: int

    def to_json(self) -> JsonObject:
        return {"group": self.group, "topic": self.topic, "partition": self.partition, "offset": self.offset}


# -- formats (pure) ----------------------------------------------------------------------------------------


def format_lines(records: Iterable[OffsetRecord]) -> str:
    return "".join(f"{paths.offset_path(r.group, r.topic, r.partition)}:{r.offset}\n" for r in records)


def format_json(records: Iterable[OffsetRecord]) -> str:
    return json.dumps({"version": JSON_VERSION, "offsets": [r.to_json() for r in records]}, indent=2) + "\n"


def format_offsets(records: Iterable[OffsetRecord], fmt: str) -> str:
    if fmt not in FORMATS:
        raise ConfigError(f"format {fmt!r}: must be one of {', '.join(FORMATS)}")
    return format_json(records) if fmt == JSON else format_lines(records)


def parse_lines(text: str, source: str = "<input>") -> list[OffsetRecord]:
    """Kafka's ``path:value`` lines; blank lines and ``#`` comments are skipped. Errors name the line."""
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        path, colon, value = line.rpartition(":")
        if not colon:
            raise ConfigError(f"{source}:{number}: expected <offset node path>:<offset>, got {line!r}")
        try:
            group, topic, partition = parse_offset_path(path.strip())
        except ConfigError as e:
            raise ConfigError(f"{source}:{number}: {e}") from e
        records.append(OffsetRecord(group, topic, partition, _offset(value.strip(), f"{source}:{number}")))
    return _no_duplicates(records, source)


def parse_json(text: str, source: str = "<input>") -> list[OffsetRecord]:
    """The JSON export (or a bare list of its ``offsets`` entries)."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"{source}: not valid JSON: {e}") from e
    entries = doc.get("offsets") if isinstance(doc, dict) else doc
    if not isinstance(entries, list):
        raise ConfigError(f"{source}: expected {{\"version\": 1, \"offsets\": [...]}}")
    if isinstance(doc, dict) and doc.get("version", JSON_VERSION) != JSON_VERSION:
        raise ConfigError(f"{source}: unsupported version {doc.get('version')!r} (this metaq reads {JSON_VERSION})")
    return _no_duplicates([_json_record(entry, f"{source}: offsets[{i}]") for i, entry in enumerate(entries)],
                          source)


def parse_offsets(text: str, source: str = "<input>", fmt: str | None = None) -> list[OffsetRecord]:
    """Either format; without ``fmt`` JSON is recognised by its first character."""
    if fmt is None:
        fmt = JSON if text.lstrip()[:1] in ("{", "[") else LINES
    if fmt not in FORMATS:
        raise ConfigError(f"format {fmt!r}: must be one of {', '.join(FORMATS)}")
    return parse_json(text, source) if fmt == JSON else parse_lines(text, source)


def _json_record(entry: JsonValue, where: str) -> OffsetRecord:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected an object with group, topic, partition and offset")
    try:
        group = validate_group(entry["group"])
        topic = validate_topic(entry["topic"])
        partition, offset = entry["partition"], entry["offset"]
    except KeyError as e:
        raise ConfigError(f"{where}: missing {e.args[0]!r}") from e
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from e
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise ConfigError(f"{where}: partition {partition!r} must be an integer >= 0")
    return OffsetRecord(group, topic, partition, _offset(offset, where))


def _offset(value: object, where: str) -> int:
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{where}: offset {value!r} must be an integer >= 0")
    return value


def _no_duplicates(records: list[OffsetRecord], source: str) -> list[OffsetRecord]:
    seen: dict[tuple[str, str, int], int] = {}
    for r in records:
        key = (r.group, r.topic, r.partition)
        if key in seen and seen[key] != r.offset:
            raise ConfigError(f"{source}: {r.group} {r.topic}-{r.partition} is given twice "
                              f"({seen[key]} and {r.offset})")
        seen[key] = r.offset
    return sorted(set(records))


# -- ZooKeeper -----------------------------------------------------------------------------------------------


def export_offsets(layout: ZkLayout, groups: Iterable[str] | None = None,
                   progress: Progress | None = None, *, kafka: GroupOffsetsStore | None = None,
                   kafka_groups: Iterable[str] = ()) -> list[OffsetRecord]:
    """Committed offsets of ``groups`` (every group when None: those under ``/consumers`` and ``kafka_groups``,
    the groups the brokers' coordinators list); GroupNotFoundError for a named group that neither ZooKeeper
    nor ``__consumer_offsets`` knows.

    With ``kafka``, a partition's offset is ``max(zookeeper, kafka)`` (what a metaq consumer resumes from, and
    what ``groups describe`` shows), so a broker-coordinated group exports as well as a ZooKeeper one; the
    line format still names the offset node path, which ``offsets import`` maps back to the group."""
    in_zookeeper = set(layout.groups())
    names = sorted(in_zookeeper | set(kafka_groups)) if groups is None else sorted(set(groups))
    records = []
    for group in names:
        try:
            nodes = layout.offset_nodes(group) if group in in_zookeeper else {}
        except ConfigError:  # not a valid group name: another tool's node under /consumers
            continue
        in_kafka, _ = read_kafka_offsets(kafka, group)
        if groups is not None and group not in in_zookeeper and not in_kafka:
            where = layout.full_path(paths.consumer_group_path(group))
            raise GroupNotFoundError(f"group {group!r} does not exist (no {where} and no offsets in "
                                     "__consumer_offsets)")
        zookeeper = {tp: n.offset for tp, n in nodes.items()}
        for tp in sorted(set(zookeeper) | set(in_kafka)):
            offset, _ = merged_offset(zookeeper.get(tp), in_kafka.get(tp))
            if offset is not None:
                records.append(OffsetRecord(group, tp[0], tp[1], offset))
        if progress is not None:
            progress(1)
    return sorted(records)


def plan_import(layout: ZkLayout, records: Iterable[OffsetRecord], log_offsets: LogOffsets | None = None,
                progress: Progress | None = None, kafka: GroupOffsetsStore | None = None) -> OffsetPlan:
    """The dry run of writing ``records``: each with the offset it replaces (``max(zookeeper, kafka)`` with
    ``kafka``). With ``log_offsets``, offsets outside the partition's log get a note (they are written as
    given: an import restores, it does not correct). Topics that do not exist get a note too."""
    records = list(records)
    if not records:
        raise MetaqError("nothing to import: the input holds no offsets")
    in_kafka = kafka_offsets_of(kafka, sorted({r.group for r in records}))
    existing = set(layout.topics())
    marks: dict[tuple[str, int], Watermarks] = {}
    if log_offsets is not None:
        marks = log_offsets.watermarks({(r.topic, r.partition) for r in records if r.topic in existing})
    changes = []
    for r in records:
        in_zookeeper, malformed = zookeeper_offset(layout, r.group, r.topic, r.partition)
        current, _ = merged_offset(in_zookeeper, in_kafka[r.group].get((r.topic, r.partition)))  # -1 is none
        m = marks.get((r.topic, r.partition))
        start, end = (m.start, m.end) if m is not None else (None, None)
        changes.append(OffsetChange(r.group, r.topic, r.partition, current, r.offset, start, end,
                                    join_notes(_import_note(r, existing, m), malformed)))
        if progress is not None:
            progress(1)
    groups = sorted({r.group for r in records})
    return OffsetPlan("import", changes, {g: layout.consumer_ids(g) for g in groups})


def _import_note(record: OffsetRecord, topics: set[str], marks: Watermarks | None) -> str:
    if record.topic not in topics:
        return "topic does not exist"
    if marks is None:
        return ""
    if marks.start is None or marks.end is None:
        return f"log offsets unknown ({marks.error})"
    if not marks.start <= record.offset <= marks.end:
        return f"outside the log [{marks.start}, {marks.end}]: members will apply auto.offset.reset"
    return ""
