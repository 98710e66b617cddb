"""``metaq offsets reset|export|import``: change, back up and restore a group's committed offsets.

    metaq offsets reset etl --topic clicks --to-datetime 2024-05-01T12:00:00Z          # dry run: the plan
    metaq offsets reset etl --topic clicks:0,1 --shift-by -100 --execute                # apply it
    metaq offsets export --group etl > etl.offsets                                      # Kafka's path:value lines
    metaq offsets import etl.offsets --execute
    metaq offsets delete etl --topic clicks:0,1                                         # as --delete-offsets
    metaq offsets reset etl --topic clicks --to-latest --export > plan.csv              # Kafka's CSV plan
    metaq offsets reset etl --from-file plan.csv --execute

Resets and imports are dry runs unless ``--execute``, and are refused while a target group has live
members unless ``--force``. New offsets of a reset are clamped to [log start, log end] with a note.
A group with offsets in ``__consumer_offsets`` gets the new offsets committed there too (so that a rewind
sticks); the coordinator's refusal while a standard-client group has live members fails the command.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from metaq.cli.output import (
    ProgressBar,
    add_group_arguments,
    add_parser,
    check_group_arguments,
    chosen_groups,
    emit,
    int_arg,
    note,
    open_admin,
    print_json,
    table,
    usage_error,
)
from metaq.cli.subparsers import SubParsers
from metaq.errors import ConfigError, GroupNotFoundError, UnknownTopicError

if TYPE_CHECKING:  # the offset tools import the Kafka clients: `metaq offsets --help` should not wait for them
    from metaq.admin import Admin, OffsetChange, OffsetPlan, ResetSpec

LINES, JSON = "lines", "json"
FORMATS = (LINES, JSON)  # metaq.admin.transfer's (tests/test_cli_startup.py checks they agree)


def register(sub: SubParsers) -> None:
    parser = sub.add_parser("offsets", help="reset, export and import committed offsets")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    _register_reset(actions)
    export = add_parser(actions, "export", "write committed offsets (all groups, or --group) to stdout or a file",
                        bootstrap=True)
    chosen = export.add_mutually_exclusive_group()
    chosen.add_argument("--group", action="append", default=None, help="only this group (repeatable)")
    chosen.add_argument("--all-groups", action="store_true", help="every group (the default)")
    export.add_argument("--format", choices=FORMATS, default=None,
                        help="lines: Kafka ExportZkOffsets' path:value (default); json (also --json)")
    export.add_argument("--output", "-o", default="-", metavar="FILE", help="file to write (default stdout)")
    export.set_defaults(func=_export)
    lookup = add_parser(actions, "lookup", "the offsets of a time, or the log start/end, per partition (kcat -Q)",
                        bootstrap=True)
    lookup.add_argument("--topic", action="append", required=True, metavar="TOPIC[:P,P]",
                        help="topic, optionally with partitions (repeatable)")
    lookup.add_argument("--time", default="latest", metavar="earliest|latest|MS|ISO8601",
                        help="the first offset at or after this time (epoch ms or ISO 8601; local time without "
                             "a UTC offset), or the log start/end (default latest)")
    lookup.add_argument("--isolation-level", choices=("read_uncommitted", "read_committed"),
                        default="read_uncommitted",
                        help="read_committed: latest is the last stable offset (the end a read_committed "
                             "consumer sees: before the first open transaction); default: the high watermark")
    lookup.set_defaults(func=_lookup)
    delete = add_parser(actions, "delete", "delete a group's committed offsets (kafka-consumer-groups "
                        "--delete-offsets)", bootstrap=True)
    delete.add_argument("group")
    delete.add_argument("--topic", action="append", required=True, metavar="TOPIC[:P,P]",
                        help="topic, optionally with partitions (repeatable)")
    delete.add_argument("--force", action="store_true",
                        help="delete even while a ZooKeeper group has live members")
    delete.set_defaults(func=_delete)
    imp = add_parser(actions, "import", "write offsets from an export file (a dry run unless --execute)")
    imp.add_argument("file", metavar="FILE", help="an export in either format, or - for stdin")
    imp.add_argument("--format", choices=FORMATS, default=None, help="default: recognised from the content")
    _add_apply_options(imp)
    imp.set_defaults(func=_import)


def _register_reset(actions: SubParsers) -> None:
    reset = add_parser(actions, "reset", "move a group's offsets (a dry run unless --execute)",
                       bootstrap=True)
    add_group_arguments(reset, several=True)
    scope = reset.add_mutually_exclusive_group()
    scope.add_argument("--topic", action="append", metavar="TOPIC[:P,P]",
                       help="topic, optionally with partitions (repeatable)")
    scope.add_argument("--all-topics", action="store_true", help="every topic the group has offsets for")
    mode = reset.add_mutually_exclusive_group(required=True)
    mode.add_argument("--to-earliest", action="store_true", help="the log start offset")
    mode.add_argument("--to-latest", action="store_true", help="the log end offset")
    mode.add_argument("--to-offset", type=int_arg, metavar="N")
    mode.add_argument("--to-datetime", metavar="ISO8601",
                      help="the first offset at or after this time (local time without a UTC offset)")
    mode.add_argument("--shift-by", type=int_arg, metavar="N", help="move the committed offset by N (may be < 0)")
    mode.add_argument("--by-duration", metavar="DURATION",
                      help="the first offset at or after now minus DURATION (ISO 8601: PT10M, P1DT2H)")
    mode.add_argument("--to-current", action="store_true",
                      help="the committed offset (the log end where there is none)")
    mode.add_argument("--from-file", metavar="PLAN.CSV",
                      help="the offsets of a CSV plan (--export's, or kafka-consumer-groups'); no --topic needed")
    reset.add_argument("--export", action="store_true",
                       help="print the plan as CSV (TOPIC,PARTITION,NEW-OFFSET lines; with GROUP first for "
                            "several groups), as kafka-consumer-groups --export")
    reset.add_argument("--create-group", action="store_true",
                       help="allow a group that does not exist yet (to start a new group at a chosen offset)")
    _add_apply_options(reset)
    reset.set_defaults(func=_reset)


def _add_apply_options(parser: argparse.ArgumentParser) -> None:
    run = parser.add_mutually_exclusive_group()
    run.add_argument("--execute", action="store_true", help="write the offsets (default: only show the plan)")
    run.add_argument("--dry-run", action="store_true", help="only show the plan (the default)")
    parser.add_argument("--force", action="store_true", help="write even while the group has live members")


# -- reset ----------------------------------------------------------------------------------------------


def reset_spec(args: argparse.Namespace) -> ResetSpec:
    from metaq.admin.offset_reset import ResetSpec

    if args.to_earliest:
        return ResetSpec.earliest()
    if args.to_latest:
        return ResetSpec.latest()
    if args.to_offset is not None:
        return ResetSpec.to_offset(args.to_offset)
    if args.to_datetime is not None:
        return ResetSpec.to_datetime(args.to_datetime)
    if args.by_duration is not None:
        return ResetSpec.by_duration(args.by_duration)
    if args.to_current:
        return ResetSpec.to_current()
    return ResetSpec.shift_by(args.shift_by)


def topic_selection(texts: list[str]) -> dict[str, list[int] | None]:
    """``--topic T[:P,P]`` options merged per topic (None: every partition)."""
    from metaq.admin.offset_reset import parse_topic_selection

    selection: dict[str, list[int] | None] = {}
    for text in texts:
        topic, partitions = parse_topic_selection(text)
        previous = selection.get(topic, [])
        selection[topic] = None if partitions is None or previous is None else sorted({*previous, *partitions})
    return selection


def _reset(args: argparse.Namespace) -> int:
    """One plan for every group chosen; with several groups, one that has nothing to reset is skipped with a
    note (as kafka-consumer-groups goes on past a group without a plan in --from-file)."""
    from metaq.admin.offset_reset import ResetSpec, merge_plans

    named = check_group_arguments(args)
    if args.from_file is None and not args.topic and not args.all_topics:
        usage_error(args, "one of --topic, --all-topics or --from-file is required")
    if args.from_file is not None and (args.topic or args.all_topics):
        usage_error(args, "--from-file takes the partitions from the file: no --topic or --all-topics")
    if args.export and args.json:
        usage_error(args, "--export and --json contradict each other")
    if args.create_group and args.bootstrap_server:
        usage_error(args, "--create-group needs --zookeeper (a new group's offsets are written there); with "
                          "--bootstrap-server a group must have committed offsets at its coordinator")
    single = len(named) == 1
    requested = None
    if args.from_file is not None:
        from metaq.admin.reset_csv import parse_reset_csv

        text, source = _read_input(args.from_file)
        requested = parse_reset_csv(text, source, group=named[0] if single else None)
    selection = topic_selection(args.topic or [])
    spec = ResetSpec.to_current() if requested is not None else reset_spec(args)  # ignored with a file
    with open_admin(args) as admin:
        plans = []
        for group in chosen_groups(args, admin):
            if requested is not None and group not in requested:
                note(f"Error: No reset plan for group {group} found")  # Kafka's words
                continue
            try:
                plans.append(admin.plan_reset(group, selection, spec, create_group=args.create_group,
                                              all_topics=args.all_topics,
                                              requested=None if requested is None else requested[group]))
            except (ConfigError, GroupNotFoundError) as e:
                if single:
                    raise
                note(f"Note: group {group}: {e}; skipped")
        if not plans:
            raise ConfigError("no group has anything to reset")
        return _finish(admin, merge_plans(plans), args, csv_with_group=not single)


# -- delete -----------------------------------------------------------------------------------------------


def _delete(args: argparse.Namespace) -> int:
    """As kafka-consumer-groups --delete-offsets: TOPIC PARTITION STATUS per partition; exit 1 when a
    partition's offset could not be deleted (e.g. a live member of a protocol group reads its topic)."""
    with open_admin(args) as admin:
        results = admin.delete_offsets(args.group, topic_selection(args.topic), force=args.force)
    emit(args, {"group": args.group, "partitions": [r.to_json() for r in results]},
         lambda: table(["TOPIC", "PARTITION", "STATUS"], [(r.topic, r.partition, r.status) for r in results]))
    return 1 if any(r.error is not None for r in results) else 0


# -- lookup -----------------------------------------------------------------------------------------------


def _lookup(args: argparse.Namespace) -> int:
    """Kafka's GetOffsetShell prints ``topic:partition:offset``; kcat -Q the same per partition. For a time
    after the last record, the log end (as Kafka's ListOffsets answers -1 and its tools then reset to the end)."""
    from metaq.admin.log_offsets import BrokerLogOffsets
    from metaq.admin.offset_reset import parse_datetime
    from metaq.admin.reader import ISOLATION_LEVELS

    when = args.time.strip().lower()
    with open_admin(args) as admin:
        keys = [(t, p) for t, partitions in _selection(args.topic, admin).items() for p in partitions]
        log_offsets = BrokerLogOffsets(admin.layout, security=admin.security,
                                       isolation_level=ISOLATION_LEVELS[args.isolation_level])
        try:
            if when in ("earliest", "latest"):
                marks = log_offsets.watermarks(keys)
                offsets = {k: (m.start if when == "earliest" else m.end) for k, m in marks.items()}
            else:
                timestamp = int(when) if when.lstrip("-").isdigit() else parse_datetime(args.time)
                offsets = dict(log_offsets.offsets_for_time(keys, timestamp))
        finally:
            log_offsets.close()
    rows = sorted(offsets.items())
    if args.json:
        print_json({"time": args.time, "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in rows]})
    else:
        print("\n".join(f"{t}:{p}:{'-' if o is None else o}" for (t, p), o in rows))
    return 0


def _selection(texts: list[str], admin: Admin) -> dict[str, list[int]]:
    """``--topic T[:P,P]`` options as topic -> partitions (every partition of the topic when none is given)."""
    from metaq.admin.groups import topic_partitions
    from metaq.admin.offset_reset import parse_topic_selection

    chosen: dict[str, list[int] | None] = {}
    for text in texts:
        topic, partitions = parse_topic_selection(text)
        chosen[topic] = None if partitions is None or chosen.get(topic, []) is None else sorted(
            {*(chosen.get(topic) or []), *partitions})
    existing = topic_partitions(admin.layout, chosen)
    missing = sorted(set(chosen) - set(existing))
    if missing:
        raise UnknownTopicError(f"topic {missing[0]!r} does not exist")
    return {t: existing[t] if wanted is None else wanted for t, wanted in chosen.items()}


# -- import / export ------------------------------------------------------------------------------------


def _export(args: argparse.Namespace) -> int:
    from metaq.admin.transfer import format_offsets

    fmt = args.format or (JSON if args.json else LINES)
    if args.json and args.format == LINES:
        usage_error(args, "--json and --format lines contradict each other")
    with open_admin(args) as admin:
        total = None if args.group is None else len(args.group)
        with ProgressBar("exporting groups", total or len(admin.layout.groups())) as bar:
            records = admin.export_offsets(args.group, progress=bar.update)
    text = format_offsets(records, fmt)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        _write_file(Path(args.output), text)
    groups = len({r.group for r in records})
    note(f"Exported {len(records)} offsets of {groups} group(s)" + ("" if args.output == "-" else f" to {args.output}"))
    return 0


def _import(args: argparse.Namespace) -> int:
    from metaq.admin.transfer import parse_offsets

    text, source = _read_input(args.file)
    records = parse_offsets(text, source, args.format)
    with open_admin(args) as admin:
        with ProgressBar("reading current offsets", len(records)) as bar:
            plan = admin.plan_import(records, progress=bar.update)
        return _finish(admin, plan, args)


def _read_input(name: str) -> tuple[str, str]:
    if name == "-":
        return sys.stdin.read(), "<stdin>"
    try:
        return Path(name).read_text(encoding="utf-8"), name
    except OSError as e:
        raise ConfigError(f"cannot read {name}: {e.strerror or e}") from e


def _write_file(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot write {path}: {e.strerror or e}") from e


# -- plans ------------------------------------------------------------------------------------------------


def _finish(admin: Admin, plan: OffsetPlan, args: argparse.Namespace, *, csv_with_group: bool = False) -> int:
    """Show the plan; with --execute apply it (GroupActiveError, exit 1, when refused). With --export the
    plan is printed as kafka-consumer-groups prints it: its CSV and a line break (System.out.println)."""
    written: list[OffsetChange] = []
    kafka_groups: list[str] = []
    if args.execute:
        with ProgressBar("writing offsets", len(plan.writes)) as bar:
            written = admin.apply_plan(plan, force=args.force, progress=bar.update, kafka_groups=kafka_groups)
    if getattr(args, "export", False):
        from metaq.admin.reset_csv import format_reset_csv

        print(format_reset_csv(plan.writes, with_group=csv_with_group))
        return 0
    if args.json:
        print_json({"executed": bool(args.execute), "written": len(written), "kafka_groups": kafka_groups,
                    **plan.to_json()})
        return 0
    print(render_plan(plan, executed=bool(args.execute)))
    if args.execute:
        also = f" (also committed to __consumer_offsets for {', '.join(kafka_groups)})" if kafka_groups else ""
        print(f"\nWrote {len(written)} offset(s){also}.")
        return 0
    live = {g: ids for g, ids in plan.live_members.items() if ids}
    if live and not args.force:
        note(f"\nNote: group(s) {', '.join(sorted(live))} have live members; --execute will be refused "
             "unless you stop them or add --force.")
    note("\nDry run: nothing was written. Add --execute to apply.")
    return 0


def render_plan(plan: OffsetPlan, *, executed: bool) -> str:
    title = f"{'Applied' if executed else 'Plan'}: {plan.action} for group(s) {', '.join(plan.groups)}"
    rows = [(c.group, c.topic, c.partition, c.current, c.new, c.log_start, c.log_end, c.note or None)
            for c in plan.changes]
    headers = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET", "LOG-START", "LOG-END", "NOTE"]
    return f"{title}\n\n{table(headers, rows)}"
