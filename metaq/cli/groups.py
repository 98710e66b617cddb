"""``metaq groups list`` and ``metaq groups describe GROUP``: members, and per partition the committed offset,
log end offset, lag, owner, last commit time (the offset node's mtime) and a status flag.

The columns follow ``kafka-consumer-groups --zookeeper --describe`` (CURRENT-OFFSET, LOG-END-OFFSET, LAG)
and ConsumerOffsetChecker (OWNER is the raw owner thread id), with LAST-COMMIT, SOURCE and STATUS added.
CURRENT-OFFSET is ``max(zookeeper, kafka)`` as metaq consumers resume from it; SOURCE says which store holds
it (zookeeper, kafka or both). When the offsets in ``__consumer_offsets`` cannot be read, a note says so.

Groups the brokers' group coordinators know (ListGroups at every broker, DescribeGroups at the one that lists
the group) are shown too: protocol groups (confluent-kafka, ``kcat -G``, kafka-python) with their members,
state and assignment, and groups with offsets only in ``__consumer_offsets``. KIND says where a group is known:
zookeeper (``/consumers``), protocol (a coordinator) or both; STATE uses Kafka's state names for both kinds: the
coordinator's (Stable, Empty, PreparingRebalance, ...) when it has one, else Stable/Empty from ZooKeeper's
registrations.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from metaq.cli.output import (
    add_group_arguments,
    add_parser,
    check_group_arguments,
    chosen_groups,
    emit,
    note,
    open_admin,
    print_json,
    table,
    when,
)
from metaq.cli.subparsers import SubParsers

if TYPE_CHECKING:  # the group tools import the Kafka clients: `metaq groups --help` should not wait for them
    from metaq.admin import GroupDescription, GroupSummary, Member, PartitionLag
    from metaq.admin.broker_groups import CoordinatorGroup
    from metaq.admin.group_deletion import GroupDeletion
from metaq.errors import MetaqError

PARTITION_HEADERS = ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "OWNER", "LAST-COMMIT",
                     "SOURCE", "STATUS"]


def register(sub: SubParsers) -> None:
    parser = sub.add_parser("groups", help="list and describe consumer groups (lag, owners, commit times)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = add_parser(actions, "list", "list every group under /consumers and every group a broker coordinates",
                         bootstrap=True)
    listing.set_defaults(func=_list)
    describe = add_parser(actions, "describe", "per-partition offset, log end, lag, owner and last commit",
                          bootstrap=True)
    add_group_arguments(describe)
    describe.add_argument("--topic", action="append", default=None, help="only this topic (repeatable)")
    describe.add_argument("--stalled-after-s", type=float, default=None, metavar="S",
                          help="flag STALLED when lag > 0 and no commit for this long (default 600)")
    view = describe.add_mutually_exclusive_group()
    view.add_argument("--state", action="store_true",
                      help="one line per kind of group: coordinator, assignment strategy, state, #members "
                           "(kafka-consumer-groups --describe --state)")
    view.add_argument("--members", action="store_true",
                      help="one line per member with its #partitions (kafka-consumer-groups --describe --members)")
    describe.add_argument("--verbose", action="store_true", help="with --members: each member's assignment")
    describe.set_defaults(func=_describe)
    delete = add_parser(actions, "delete", "delete a group without members: /consumers/GROUP and/or at its coordinator",
                        bootstrap=True)
    add_group_arguments(delete)
    delete.set_defaults(func=_delete)
    migrate = add_parser(actions, "migrate", "move a running group between ZooKeeper and broker coordination "
                         "(docs/broker-coordinated-consumer.md, live migration)")
    migrate.add_argument("group", metavar="GROUP")
    migrate.add_argument("--to", required=True, choices=["kafka", "zookeeper"], help="the coordination to move to")
    migrate.add_argument("--member-by-member", action="store_true",
                         help="switch one member at a time (the next once the last reported its new mode)")
    migrate.add_argument("--timeout-s", type=float, default=120.0, metavar="S",
                         help="give up (exit 1, the marker left where it got to) if a step takes longer (default 120)")
    migrate.set_defaults(func=_migrate)


def _list(args: argparse.Namespace) -> int:
    """Every group is listed; one that could not be read (a malformed node) shows STATE ``malformed``, its
    error goes to stderr, and the exit code is 1 (an error, per the ops tools' 0/1/2 convention)."""
    with open_admin(args) as admin:
        listing = admin.group_listing()
    if not args.json:
        for text in listing.notes:
            note(f"Note: {text}")
    emit(args, {"groups": [s.to_json() for s in listing.groups], "notes": listing.notes},
         lambda: render_list(listing.groups))
    failed = [s for s in listing.groups if s.error is not None]
    for summary in failed:
        note(f"metaq groups: error: group {summary.group}: {summary.error}")
    return 1 if failed else 0


def _describe(args: argparse.Namespace) -> int:
    """One group, or with --all-groups each group in turn (a blank line between them, as
    kafka-consumer-groups --describe --all-groups; ``--json``: ``{"groups": [...]}``)."""
    check_group_arguments(args)
    with open_admin(args) as admin:
        groups = chosen_groups(args, admin)
        stall_ms = None if args.stalled_after_s is None else int(args.stalled_after_s * 1000)
        descriptions = [admin.describe_group(group, topics=args.topic, stall_after_ms=stall_ms) for group in groups]
    if not args.all_groups:
        _print_description(args, descriptions[0])
    elif args.json:
        print_json({"groups": [_json_view(args, d) for d in descriptions]})
    elif not descriptions:
        print("No consumer groups.")
    else:
        for i, description in enumerate(descriptions):
            if i:
                print()
            _print_description(args, description)
    return 0


def _migrate(args: argparse.Namespace) -> int:
    """Writes the group's migration marker and waits until the members followed it to DONE."""
    from metaq.admin.migration import MigrationStep, migrate_group

    def progress(step: MigrationStep) -> None:
        if not args.json:
            print(f"{args.group}: {step.state} reached by the members in {step.seconds:.2f}s")

    with open_admin(args) as admin:
        result = migrate_group(admin.layout, args.group, args.to, member_by_member=args.member_by_member,
                               coordinators=admin.coordinators, timeout_s=args.timeout_s, on_step=progress)
    emit(args, result.to_json(), lambda: f"Group '{args.group}' now coordinated by {args.to} "
         f"(epoch {result.epoch}, {result.seconds:.2f}s; {result.owner_nodes_removed} owner nodes removed).")
    return 0


def _print_description(args: argparse.Namespace, description: GroupDescription) -> None:
    if description.kafka_note and not args.json:
        note(f"Note: {description.kafka_note}")
    for member in description.members:
        if not member.ephemeral and not args.json:
            note(f"Warning: member {member.consumer_id} is registered by a persistent node: it is no live "
                 "consumer. metaq consumers ignore it; Kafka 0.8 consumers assign it partitions nobody reads. "
                 "Delete the node.")
    group = description.group
    if args.state:
        emit(args, _json_view(args, description), lambda: table(STATE_HEADERS, state_rows(description)))
    elif args.members:
        rows = member_rows(description, verbose=args.verbose)
        headers = MEMBER_HEADERS + (["ASSIGNMENT"] if args.verbose else [])
        emit(args, _json_view(args, description),
             lambda: table(headers, rows) if rows else f"Consumer group '{group}' has no active members.")
    else:
        emit(args, description.to_json(), lambda: render_description(description))


def _json_view(args: argparse.Namespace, d: GroupDescription) -> dict[str, object]:
    """The ``--json`` document of one group in the view asked for (--state, --members or the offsets)."""
    if args.state:
        return {"group": d.group, "state": [dict(zip(STATE_KEYS, r, strict=True)) for r in state_rows(d)]}
    if args.members:
        keys = MEMBER_KEYS + (["assignment"] if args.verbose else [])
        return {"group": d.group,
                "members": [dict(zip(keys, r, strict=True)) for r in member_rows(d, verbose=args.verbose)]}
    document: dict[str, object] = d.to_json()
    return document


STATE_HEADERS = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
MEMBER_HEADERS = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
STATE_KEYS = ["group", "coordinator", "assignment_strategy", "state", "members"]  # the same columns in --json
MEMBER_KEYS = ["group", "consumer_id", "host", "client_id", "partitions"]


def state_rows(d: GroupDescription) -> list[tuple[object, ...]]:
    """--state: a coordinator's group as Kafka prints it; a ZooKeeper group with coordinator ``zookeeper``
    (members balance themselves: no coordinator, and the strategy is each member's own setting, not shown)."""
    from metaq.admin.group_listing import zookeeper_state

    rows: list[tuple[object, ...]] = []
    if d.members or d.protocol is None:
        rows.append((d.group, "zookeeper", None, zookeeper_state(len(d.members)), len(d.members)))
    if d.protocol is not None:
        rows.append((d.group, f"broker {d.protocol.coordinator}", d.protocol.protocol or None, d.protocol.state,
                     len(d.protocol.members)))
    return rows


def member_rows(d: GroupDescription, *, verbose: bool = False) -> list[tuple[object, ...]]:
    """--members: ZooKeeper members with the partitions their threads own, then the coordinator's members with
    their assignment; ``verbose`` adds the partitions (Kafka's ``topic(p,p)`` form)."""
    rows: list[tuple[object, ...]] = []
    for m in d.members:
        owned = tuple((p.topic, p.partition) for p in d.partitions if p.consumer_id == m.consumer_id)
        rows.append((d.group, m.consumer_id, m.host, None, len(owned), *([_assignment(owned)] if verbose else [])))
    for c in d.protocol.members if d.protocol is not None else ():
        rows.append((d.group, c.member_id, c.host, c.client_id, len(c.assignment),
                     *([_assignment(c.assignment)] if verbose else [])))
    return rows


def _assignment(partitions: tuple[tuple[str, int], ...]) -> str | None:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return ",".join(f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in sorted(by_topic.items())) or None


def _delete(args: argparse.Namespace) -> int:
    """As kafka-consumer-groups --delete: refused (exit 1) while the group has members. With --all-groups each
    group is tried; those refused are listed after the others (exit 1 when any was)."""
    check_group_arguments(args)
    with open_admin(args) as admin:
        groups = chosen_groups(args, admin)
        if not args.all_groups:
            deleted = admin.delete_group(groups[0])
            emit(args, deleted.to_json(), lambda: f"Deletion of requested consumer group '{args.group}' was "
                                                  f"successful ({_where(deleted)}).")
            return 0
        done, failed = [], {}
        for group in groups:
            try:
                done.append(admin.delete_group(group))
            except MetaqError as e:
                failed[group] = str(e)
    if args.json:
        print_json({"deleted": [d.to_json() for d in done], "failed": failed})
    else:
        if done:
            names = ", ".join(f"'{d.group}'" for d in done)
            print(f"Deletion of requested consumer groups ({names}) was successful.")
        if failed:
            print("Deletion of some consumer groups failed:")
            for group, error in failed.items():
                print(f"* Group '{group}' could not be deleted due to: {error}")
        if not done and not failed:
            print("No consumer groups.")
    return 1 if failed else 0


def _where(deleted: GroupDeletion) -> str:
    where = [w for w, done in (("ZooKeeper", deleted.zookeeper),
                                (f"its coordinator (broker {deleted.coordinator})", deleted.coordinator is not None))
             if done]
    return " and ".join(where)


def render_list(summaries: list[GroupSummary]) -> str:
    if not summaries:
        return "No consumer groups."
    return table(["GROUP", "KIND", "MEMBERS", "STATE", "TOPICS"],
                 [(s.group, s.kind, s.members, _state(s), ",".join(s.topics) or None) for s in summaries])


def _state(summary: GroupSummary) -> str:
    if summary.error is not None:
        return "malformed"
    return summary.state or ("Stable" if summary.active else "Empty")


def render_description(d: GroupDescription) -> str:
    count = len(d.members) + (len(d.protocol.members) if d.protocol else 0)
    members = f"{count} live member{'' if count == 1 else 's'}" if count else "no live members"
    parts = [f"Group {d.group}: {members}, offsets in {d.offsets_storage}, {_total_lag(d)}"]
    if d.members:
        parts.append(table(["CONSUMER-ID", "HOST", "SUBSCRIPTION", "REGISTERED", "NODE"],
                           [(m.consumer_id, m.host, _subscription(m), when(m.registered_ms),
                             "ephemeral" if m.ephemeral else "PERSISTENT") for m in d.members]))
    if d.protocol is not None:
        parts.append(_render_protocol(d.protocol))
    if d.migration is not None:
        parts.append(d.migration.render())
    if d.partitions:
        parts.append(table(PARTITION_HEADERS, [
            (p.topic, p.partition, p.offset, p.log_end, p.lag, p.owner, _last_commit(p), p.source, p.status)
            for p in d.partitions]))
    else:
        parts.append("No committed offsets, owners or subscribed topics.")
    return "\n\n".join(parts)


def _total_lag(d: GroupDescription) -> str:
    """The total, never contradicting the rows: rows without a lag make it a lower bound, and say why."""
    unknown = d.unknown_lag
    if not unknown:
        return f"total lag {d.total_lag}"
    waiting = sum(1 for p in d.partitions if p.not_committed_yet)
    why = (f"{waiting} owned partition{'' if waiting == 1 else 's'} not committed yet" if waiting == unknown
           else f"{unknown} partition{'' if unknown == 1 else 's'} without a lag")
    if unknown == len(d.partitions):
        return f"total lag unknown ({why})"
    return f"total lag at least {d.total_lag} ({why})"


def _last_commit(p: PartitionLag) -> str:
    """LAST-COMMIT: the offset node's mtime; for an owned partition without an offset yet, say so (the
    node's times are then its owner's claim, not a commit)."""
    return "not committed yet" if p.not_committed_yet else when(p.last_commit_ms)


def _render_protocol(group: CoordinatorGroup) -> str:
    protocol = "/".join(filter(None, [group.protocol_type, group.protocol])) or "none"
    head = f"Coordinator (broker {group.coordinator}): state {group.state}, protocol {protocol}"
    if not group.members:
        return head
    return head + "\n" + table(["MEMBER-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"], [
        (m.member_id, m.client_id, m.host, ",".join(f"{t}-{p}" for t, p in m.assignment) or None)
        for m in group.members])


def _subscription(member: Member) -> str:
    items = ",".join(f"{topic}:{streams}" for topic, streams in member.subscription.items())
    return items if member.pattern == "static" else f"{member.pattern} {items}"
