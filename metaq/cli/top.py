"""``metaq top GROUP``: a live terminal view of a consumer group, redrawn every ``--interval`` seconds.

It shows the members and what each owns; per partition the owner, committed offset, log end, lag (with a
bar), consumption rate, last commit age and status (ORPHAN, NO_OWNER, ...); and a rebalance log of members
joining and leaving and partitions changing owner. Keys: ``q`` quits, ``r`` refreshes now; Ctrl-C quits too.
``--once`` prints one frame and exits (rates need two refreshes, so they show ``-``).

Protocol groups (standard clients; the group exists only in the broker's coordinator) show the offsets in
``__consumer_offsets`` and their lag; their members come from DescribeGroups, and show as
``unknown (no DescribeGroups)`` while the broker does not offer it. The data is that of ``metaq groups
describe`` (:mod:`metaq.admin.groups`); the rates and the log are :mod:`metaq.admin.watch`.
"""

from __future__ import annotations

import argparse

from metaq.cli.output import add_parser
from metaq.cli.subparsers import SubParsers


def register(sub: SubParsers) -> None:
    parser = add_parser(sub, "top", "a live view of a group: members, lag, rates, orphans and rebalances")
    parser.add_argument("group")
    parser.add_argument("--interval", type=_seconds, default=2.0, metavar="SECONDS",
                        help="refresh every SECONDS (default 2)")
    parser.add_argument("--once", action="store_true", help="print one frame and exit (for scripts; with --json)")
    parser.set_defaults(func=_run)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number of seconds: {text!r}") from None
    if not 0.1 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"--interval must be between 0.1 and 3600 seconds, not {text}")
    return value


def _run(args: argparse.Namespace) -> int:
    from metaq.cli.top_screen import run  # rich and the admin API: `metaq top --help` needs neither

    return run(args)
