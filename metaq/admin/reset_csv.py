"""Reset plans as CSV, in kafka-consumer-groups' ``--reset-offsets --export`` / ``--from-file`` format.

    text = format_reset_csv(plan.writes, with_group=False)   # "clicks,0,1200\\nclicks,1,1300\\n"
    offsets = parse_reset_csv(text, "plan.csv", group="etl")  # {"etl": {("clicks", 0): 1200, ...}}

Kafka's format (docs/ops-cli-parity.md §1 cites its source): no header; one ``TOPIC,PARTITION,NEW-OFFSET`` line
per partition when the command names exactly one ``--group``, else ``GROUP,TOPIC,PARTITION,NEW-OFFSET``
(``--all-groups`` or several groups). A field holding a comma, a double quote or a line break is quoted, a
quote doubled (RFC 4180, as Jackson's CSV writer does). Reading, a 3-field file is taken as one group's only
when a single group is given, as Kafka reads it.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from typing import Protocol

from metaq.errors import ConfigError
from zk_layout import validate_group, validate_topic

PlanOffsets = dict[str, dict[tuple[str, int], int]]
"""group -> (topic, partition) -> the new offset."""


class PlannedOffset(Protocol):
    """What a plan row gives the CSV (an :class:`~metaq.admin.offset_reset.OffsetChange` with a new offset)."""

    @property
    def group(self) -> str: ...
    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def new(self) -> int | None: ...


def format_reset_csv(changes: Iterable[PlannedOffset], *, with_group: bool) -> str:
    """One line per change that has a new offset, sorted (Kafka's order is a hash map's: any order reads back)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
    for c in sorted(changes, key=lambda c: (c.group, c.topic, c.partition)):
        if c.new is not None:
            writer.writerow([c.group, c.topic, c.partition, c.new] if with_group else [c.topic, c.partition, c.new])
    return out.getvalue()


def parse_reset_csv(text: str, source: str, *, group: str | None) -> PlanOffsets:
    """The plan in ``text``. ``group``: the one group the command names (None for --all-groups or several),
    which a 3-field file needs. Blank lines are skipped; any other bad line is a ConfigError naming it."""
    rows = [(n, row) for n, row in enumerate(csv.reader(io.StringIO(text)), start=1) if any(f.strip() for f in row)]
    if not rows:
        raise ConfigError(f"{source}: the reset plan holds no offsets")
    width = len(rows[0][1])
    if width == 3 and group is None:
        raise ConfigError(f"{source}: TOPIC,PARTITION,NEW-OFFSET lines need exactly one --group "
                          "(a plan for several groups has GROUP,TOPIC,PARTITION,NEW-OFFSET lines)")
    plan: PlanOffsets = {}
    for number, row in rows:
        if len(row) != width or width not in (3, 4):
            raise ConfigError(f"{source}:{number}: expected "
                              f"{'TOPIC,PARTITION,NEW-OFFSET' if width == 3 else 'GROUP,TOPIC,PARTITION,NEW-OFFSET'}"
                              f", got {','.join(row)!r}")
        owner, (topic, partition, offset) = (group, row) if width == 3 else (row[0], row[1:])
        assert owner is not None
        try:
            key = (validate_topic(topic.strip()), _number(partition, "partition"))
            plan.setdefault(validate_group(owner), {})[key] = _number(offset, "offset")
        except ConfigError as e:
            raise ConfigError(f"{source}:{number}: {e}") from e
    return plan


def _number(text: str, what: str) -> int:
    value = text.strip()
    if not (value.isascii() and value.isdigit()):
        raise ConfigError(f"{what} {text!r} must be an integer >= 0")
    return int(value)
