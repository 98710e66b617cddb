"""``metaq topics create|list|describe``.

    metaq topics create --zookeeper 127.0.0.1:2181 --topic clicks --partitions 6
    metaq topics list --zookeeper 127.0.0.1:2181
    metaq topics describe clicks --zookeeper 127.0.0.1:2181     # leader, replicas, ISR, log start and end
"""

from __future__ import annotations

import argparse

from metaq.admin import TopicDetail
from metaq.broker.topics import create_topic
from metaq.cli.output import ProgressBar, add_parser, emit, open_admin, table


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("topics", help="create and inspect topics")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = add_parser(actions, "create", "create a topic, spreading partitions over live brokers")
    create.add_argument("--topic", required=True)
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--replication-factor", type=int, default=1)
    create.set_defaults(func=_create)
    listing = add_parser(actions, "list", "list topics with their partition counts")
    listing.set_defaults(func=_list)
    describe = add_parser(actions, "describe", "partitions with leader, replicas, ISR, log start and end offsets")
    describe.add_argument("topic", nargs="*", help="topics to describe (default: all)")
    describe.set_defaults(func=_describe)


def _create(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        assignment = create_topic(admin.layout, args.topic, args.partitions,
                                  replication_factor=args.replication_factor)
    leaders = {p: r[0] for p, r in sorted(assignment.partitions.items())}
    emit(args, {"topic": args.topic, "partitions": args.partitions, "leaders": {str(p): b for p, b in leaders.items()}},
         lambda: f"Created topic {args.topic} with {args.partitions} partitions (partition:leader "
                 f"{', '.join(f'{p}:{b}' for p, b in leaders.items())})")
    return 0


def _list(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        topics = admin.list_topics()
    emit(args, {"topics": [t.to_json() for t in topics]},
         lambda: table(["TOPIC", "PARTITIONS"], [(t.topic, t.partitions) for t in topics]) if topics
         else "No topics.")
    return 0


def _describe(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        names = args.topic or [t.topic for t in admin.list_topics()]
        with ProgressBar("describing topics", len(names)) as bar:
            details = []
            for name in names:
                details.append(admin.describe_topic(name))
                bar.update()
    emit(args, {"topics": [d.to_json() for d in details]}, lambda: render(details))
    return 0


def render(details: list[TopicDetail]) -> str:
    if not details:
        return "No topics."
    parts = []
    for d in details:
        config = ",".join(f"{k}={v}" for k, v in sorted(d.config.items())) or "-"
        rows = [(p.partition, p.leader, ",".join(map(str, p.replicas)), ",".join(map(str, p.isr)) or None,
                 p.log_start, p.log_end, p.messages, p.error) for p in d.partitions]
        parts.append(f"Topic {d.topic}: {len(d.partitions)} partitions, config {config}\n" + table(
            ["PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START-OFFSET", "LOG-END-OFFSET", "MESSAGES", "ERROR"],
            rows))
    return "\n\n".join(parts)
