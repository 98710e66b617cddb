"""The ops API: inspect and repair consumer groups, owner nodes, offsets and topics.

    from metaq.admin import Admin, ResetSpec

    with Admin.connect("127.0.0.1:2181/kafka") as admin:
        group = admin.describe_group("etl")                      # lag, owner, last commit per partition
        print(group.total_lag, [p.status for p in group.problems()])
        report = admin.owners("etl")                              # orphans flagged
        plan = admin.plan_reset("etl", {"clicks": None}, ResetSpec.to_datetime("2024-05-01T12:00:00Z"))
        admin.apply_plan(plan)                                    # refused while the group has live members

The ``metaq groups|owners|offsets|topics`` commands are a thin layer over this package. Offsets are read
from and written to ZooKeeper (``/consumers/<group>/offsets``), in the plain decimal form Kafka's tools and
Burrow read; groups' offsets in ``__consumer_offsets`` (``offsets.storage=kafka``, standard clients) are
read over the offsets channel too, and resets and imports commit there as well when a group has any.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from metaq.lazy import lazy_exports

# name -> the module that defines it; imported on first use (PEP 562), so that ``from metaq.admin import
# TopicDetail`` does not pull in the group tools' Kafka clients (``metaq --help`` and ZooKeeper-only commands).
_HOMES = {
    "Admin": "client", "resolve_connect": "client",
    "GroupDescription": "groups", "GroupSummary": "group_listing", "Member": "groups", "PartitionLag": "groups",
    "EARLIEST": "log_offsets", "LATEST": "log_offsets", "BrokerLogOffsets": "log_offsets",
    "LogOffsets": "log_offsets", "Watermarks": "log_offsets",
    "OffsetChange": "offset_reset", "OffsetPlan": "offset_reset", "ResetSpec": "offset_reset", "format_ms": "timefmt",
    "parse_topic_selection": "offset_reset",
    "OwnerRow": "owners", "OwnersReport": "owners",
    "PartitionReader": "reader",
    "PartitionDetail": "topics", "TopicDetail": "topics", "TopicSummary": "topics",
    "OffsetRecord": "transfer", "format_offsets": "transfer", "parse_offsets": "transfer",
}

if TYPE_CHECKING:
    from metaq.admin.client import Admin, resolve_connect
    from metaq.admin.group_listing import GroupSummary
    from metaq.admin.groups import GroupDescription, Member, PartitionLag
    from metaq.admin.log_offsets import EARLIEST, LATEST, BrokerLogOffsets, LogOffsets, Watermarks
    from metaq.admin.offset_reset import OffsetChange, OffsetPlan, ResetSpec, parse_topic_selection
    from metaq.admin.owners import OwnerRow, OwnersReport
    from metaq.admin.reader import PartitionReader
    from metaq.admin.timefmt import format_ms
    from metaq.admin.topics import PartitionDetail, TopicDetail, TopicSummary
    from metaq.admin.transfer import OffsetRecord, format_offsets, parse_offsets


__getattr__ = lazy_exports(__name__, globals(), _HOMES)

__all__ = [
    "EARLIEST",
    "LATEST",
    "Admin",
    "BrokerLogOffsets",
    "GroupDescription",
    "GroupSummary",
    "LogOffsets",
    "Member",
    "OffsetChange",
    "OffsetPlan",
    "OffsetRecord",
    "OwnerRow",
    "OwnersReport",
    "PartitionDetail",
    "PartitionLag",
    "PartitionReader",
    "ResetSpec",
    "TopicDetail",
    "TopicSummary",
    "Watermarks",
    "format_ms",
    "format_offsets",
    "parse_offsets",
    "parse_topic_selection",
    "resolve_connect",
]
