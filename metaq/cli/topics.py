"""``metaq topics create --zookeeper HOST:PORT[/chroot] --topic T --partitions N``."""

from __future__ import annotations

import argparse

from metaq.broker.topics import create_topic
from metaq.zkclient import connect
from zk_layout import ZkLayout


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("topics", help="create and inspect topics")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="create a topic, spreading partitions over live brokers")
    create.add_argument("--zookeeper", required=True, help="ZooKeeper connect string host:port[/chroot]")
    create.add_argument("--topic", required=True)
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--replication-factor", type=int, default=1)
    create.set_defaults(func=_create)


def _create(args: argparse.Namespace) -> int:
    client = connect(args.zookeeper)
    try:
        assignment = create_topic(
            ZkLayout(client), args.topic, args.partitions, replication_factor=args.replication_factor
        )
    finally:
        client.stop()
        client.close()
    leaders = ", ".join(f"{p}:{r[0]}" for p, r in sorted(assignment.partitions.items()))
    print(f"Created topic {args.topic} with {args.partitions} partitions (partition:leader {leaders})")
    return 0
