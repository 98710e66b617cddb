"""``metaq brokers log-dirs``: each broker's log directories, their partitions and sizes, like
``kafka-log-dirs --describe``; ``metaq brokers move-replica-dir`` moves one replica to another of its broker's
directories while it is written (AlterReplicaLogDirs; docs/log-dirs.md).

    metaq brokers log-dirs --bootstrap-server B [--broker-list 0,1] [--topic-list orders] [--json]
    metaq brokers move-replica-dir --bootstrap-server B --topic orders --partition 0 --broker 1 --dir /data2
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from metaq.cli.output import add_parser, command_security, emit, note, quiet_libraries, table, usage_error
from metaq.cli.subparsers import SubParsers

if TYPE_CHECKING:  # imported where used: `metaq brokers --help` needs no client
    from metaq.admin.bootstrap import BootstrapLayout


def register(sub: SubParsers) -> None:
    parser = sub.add_parser("brokers", help="the brokers' log directories (like kafka-log-dirs)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    describe = add_parser(actions, "log-dirs", "each broker's log directories, with partitions and sizes",
                          bootstrap=True)
    describe.add_argument("--broker-list", metavar="ID[,ID]", help="only these brokers (default: every live one)")
    describe.add_argument("--topic-list", metavar="TOPIC[,TOPIC]", help="only these topics' partitions")
    describe.set_defaults(func=_describe)
    move = add_parser(actions, "move-replica-dir", "move a replica to another log directory of its broker",
                      json_output=False, bootstrap=True)
    move.add_argument("--topic", required=True)
    move.add_argument("--partition", type=int, required=True)
    move.add_argument("--broker", type=int, required=True, help="the broker holding the replica")
    move.add_argument("--dir", required=True, help="the target log directory (one of that broker's log.dirs)")
    move.set_defaults(func=_move)


def _layout(args: argparse.Namespace) -> BootstrapLayout:
    if args.bootstrap_server is None:
        usage_error(args, "--bootstrap-server is required: log directories are asked from the brokers")
    quiet_libraries()
    from metaq.admin.bootstrap import BootstrapLayout

    return BootstrapLayout.connect(args.bootstrap_server, command_security(args))


def _ids(args: argparse.Namespace, text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        usage_error(args, f"--broker-list {text!r}: expected broker ids separated by commas")
        raise


def _describe(args: argparse.Namespace) -> int:
    from metaq.admin.log_dirs import describe_log_dirs

    topics = None if args.topic_list is None else [t for t in args.topic_list.split(",") if t.strip()]
    brokers = describe_log_dirs(_layout(args), command_security(args), brokers=_ids(args, args.broker_list),
                                topics=topics)
    rows = []
    for broker in brokers:
        for d in broker.dirs:
            if not d.replicas:
                rows.append([broker.broker_id, d.path, d.error or "online", None, None, None, None])
            for r in d.replicas:
                rows.append([broker.broker_id, d.path, d.error or "online", f"{r.topic}-{r.partition}", r.size,
                             r.offset_lag, "future" if r.is_future else ""])
    emit(args, {"version": 1, "brokers": [b.to_json() for b in brokers]},
         lambda: table(["BROKER", "LOG-DIR", "STATUS", "PARTITION", "SIZE", "OFFSET-LAG", "FUTURE"],
                       rows))
    return 0


def _move(args: argparse.Namespace) -> int:
    from metaq.admin.log_dirs import move_replica

    move_replica(_layout(args), command_security(args), args.topic, args.partition, broker_id=args.broker,
                 log_dir=args.dir)
    note(f"moving {args.topic}-{args.partition} on broker {args.broker} to {args.dir}: follow it with "
         "`metaq brokers log-dirs` (a future replica until it has caught up)")
    return 0
