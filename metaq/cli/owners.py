"""``metaq owners GROUP``: the owner nodes of a group with orphans flagged; ``--watch`` for a live view,
``--delete-orphans`` (a dry run unless ``--execute``) to remove owner nodes that name dead consumers.

ORPHAN: the owner's consumer id is not registered under ``ids`` (its node blocks every rebalance).
NO_OWNER: members subscribe to the topic but nobody owns the partition (normal during a rebalance).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING

from metaq.cli.output import add_parser, note, open_admin, print_json, table, when
from metaq.cli.subparsers import SubParsers
from metaq.json_types import JsonObject

if TYPE_CHECKING:  # the admin API imports kazoo and the Kafka clients: `metaq owners --help` needs neither
    from metaq.admin import Admin, OwnersReport


def register(sub: SubParsers) -> None:
    parser = add_parser(sub, "owners", "owner nodes of a group, with orphans flagged")
    parser.add_argument("group")
    parser.add_argument("--watch", nargs="?", type=float, const=2.0, default=None, metavar="SECONDS",
                        help="redraw every SECONDS (default 2) until Ctrl-C; with --json, one document a line")
    parser.add_argument("--iterations", type=int, default=None, help=argparse.SUPPRESS)  # bounds --watch in tests
    parser.add_argument("--delete-orphans", action="store_true",
                        help="remove owner nodes naming consumers that are no longer registered (dry run)")
    parser.add_argument("--execute", action="store_true", help="with --delete-orphans: really delete them")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        if args.watch is not None:
            return _watch(admin, args)
        report = admin.owners(args.group)
        if args.delete_orphans:
            return _delete(admin, report, args)
        if args.json:
            print_json(report.to_json())
        else:
            print(render(report))
    return 0


def render(report: OwnersReport) -> str:
    members = ", ".join(report.members) if report.members else "none"
    summary = f"Group {report.group}: live members: {members}"
    if report.persistent_members:
        summary += (f"\nWarning: registered by persistent nodes, no live consumers: "
                    f"{', '.join(report.persistent_members)}")
    flagged = len(report.orphans) + len(report.unowned)
    if not report.rows:
        return f"{summary}\nNo owner nodes."
    rows = [(r.topic, r.partition, r.owner, r.ephemeral, when(r.claimed_ms), r.status) for r in report.rows]
    tail = f"{len(report.orphans)} orphan(s), {len(report.unowned)} unowned partition(s)" if flagged else "All OK."
    return "\n\n".join([summary, table(["TOPIC", "PARTITION", "OWNER", "EPHEMERAL", "CLAIMED", "STATUS"], rows),
                        tail])


def _watch(admin: Admin, args: argparse.Namespace) -> int:
    """Poll every ``--watch`` seconds and print a frame only when the owners changed (a first frame always),
    as ``watch``-style tools that append to a log or a pipe should; Ctrl-C ends the watch normally.
    ``--iterations`` counts polls."""
    clear = sys.stdout.isatty() and not args.json
    count = 0
    shown: JsonObject | None = None
    try:
        while args.iterations is None or count < args.iterations:
            report = admin.owners(args.group)
            document = report.to_json()
            if document != shown:
                shown = document
                _print_frame(report, args, clear)
            count += 1
            if args.iterations is None or count < args.iterations:
                time.sleep(args.watch)
    except KeyboardInterrupt:
        pass
    return 0


def _print_frame(report: OwnersReport, args: argparse.Namespace, clear: bool) -> None:
    if args.json:
        sys.stdout.write(json.dumps({"time_ms": int(time.time() * 1000), **report.to_json()}) + "\n")
    else:
        if clear:
            sys.stdout.write("\x1b[H\x1b[2J")
        sys.stdout.write(f"{time.strftime('%H:%M:%S')}  (polling every {args.watch:g}s, shown on change; "
                         f"Ctrl-C to stop)\n{render(report)}\n\n")
    sys.stdout.flush()


def _delete(admin: Admin, report: OwnersReport, args: argparse.Namespace) -> int:
    orphans = [(r.topic, r.partition, r.owner) for r in report.orphans]
    deleted = admin.delete_orphans(report) if args.execute and orphans else []
    if args.json:
        print_json({"group": report.group, "executed": args.execute,
                    "orphans": [{"topic": t, "partition": p, "owner": o} for t, p, o in orphans],
                    "deleted": [{"topic": t, "partition": p} for t, p in deleted]})
        return 0
    if not orphans:
        print(f"Group {report.group}: no orphan owner nodes.")
        return 0
    print(table(["TOPIC", "PARTITION", "OWNER"], orphans))
    if args.execute:
        print(f"\nDeleted {len(deleted)} of {len(orphans)} orphan owner node(s).")
    else:
        note("\nDry run: nothing was deleted. Add --execute to delete these owner nodes.")
    return 0
