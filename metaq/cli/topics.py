"""``metaq topics create|list|describe|delete|alter|alter-config``.

    metaq topics create --zookeeper 127.0.0.1:2181 --topic clicks --partitions 6 --topic-config retention.ms=86400000
    metaq topics list --zookeeper 127.0.0.1:2181
    metaq topics describe clicks --zookeeper 127.0.0.1:2181     # leader, replicas, ISR, log start and end
    metaq topics describe cdc --bootstrap-server 127.0.0.1:9092 --metrics-url 0=http://127.0.0.1:9404/metrics
        # and the cleanup policy; compacted topics: each partition's dirty ratio, from its leader's metrics
    metaq topics alter clicks --partitions 12 --zookeeper 127.0.0.1:2181     # grow only, as kafka-topics --alter
    metaq topics delete clicks --zookeeper 127.0.0.1:2181       # /admin/delete_topics: the brokers delete it
    metaq topics alter-config clicks --set segment.bytes=1048576 --delete retention.ms --zookeeper 127.0.0.1:2181
    metaq topics create --topic clicks --partitions 6 --bootstrap-server 127.0.0.1:9092   # CreateTopics etc.
    (--bootstrap-server: every command but elect-leaders, through the brokers: metaq/cli/broker_topics.py)
    metaq topics reassign --generate --topics-to-move-json-file t.json --broker-list 2,3 --zookeeper 127.0.0.1:2181
    metaq topics reassign --execute|--verify|--cancel --reassignment-json-file plan.json --zookeeper 127.0.0.1:2181
    metaq topics reassign --execute --reassignment-json-file plan.json --throttle 10485760 --bootstrap-server B
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from metaq.cli import broker_topics
from metaq.cli import reassign as reassign_command
from metaq.cli.output import ProgressBar, add_parser, emit, note, open_admin, table, usage_error
from metaq.cli.subparsers import SubParsers
from metaq.errors import ZooKeeperError

if TYPE_CHECKING:  # imported where used: `metaq topics --help` needs neither the admin API nor the broker
    from metaq.admin import TopicDetail, TopicSummary
    from metaq.admin.cleaner_metrics import MetricsSource

# the keys of metaq.broker.topic_config.TOPIC_CONFIG_KEYS, named here for --help without importing the broker
# (tests/test_cli_startup.py checks they are the same)
TOPIC_CONFIG_NAMES = ("retention.ms", "retention.bytes", "segment.bytes", "segment.ms", "segment.index.bytes",
                      "index.interval.bytes", "max.message.bytes", "file.delete.delay.ms", "flush.messages",
                      "cleanup.policy", "min.cleanable.dirty.ratio", "min.compaction.lag.ms",
                      "max.compaction.lag.ms", "delete.retention.ms", "min.insync.replicas",
                      "leader.replication.throttled.replicas", "follower.replication.throttled.replicas",
                      "message.timestamp.type")


def register(sub: SubParsers) -> None:
    parser = sub.add_parser("topics", help="create and inspect topics")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = add_parser(actions, "create", "create a topic, spreading partitions over live brokers",
                        bootstrap=True)
    create.add_argument("--topic", required=True)
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--replication-factor", type=int, default=1)
    create.add_argument("--topic-config", action="append", default=[], metavar="KEY=VALUE",
                        help=f"a topic config override (repeatable): {', '.join(TOPIC_CONFIG_NAMES)}")
    create.set_defaults(func=_create)
    listing = add_parser(actions, "list", "list topics with their partition counts",
                         bootstrap=True)
    listing.add_argument("--under-replicated", action="store_true",
                         help="list the partitions with fewer live in-sync replicas than replicas, or offline")
    listing.set_defaults(func=_list)
    describe = add_parser(actions, "describe", "partitions with leader, replicas, ISR, log start and end offsets",
                          bootstrap=True)
    describe.add_argument("topic", nargs="*", help="topics to describe (default: all)")
    only = describe.add_mutually_exclusive_group()
    only.add_argument("--under-min-isr", action="store_true",
                      help="only partitions with fewer in-sync replicas than min.insync.replicas, or no leader")
    only.add_argument("--unavailable", action="store_true", help="only partitions without a live leader")
    describe.add_argument("--metrics-url", action="append", default=[], metavar="[BROKER_ID=]URL",
                          help="a broker's Prometheus endpoint (metrics.port), for the DIRTY-RATIO of compacted "
                               "topics (repeatable; with BROKER_ID the ratio of the partitions that broker leads)")
    describe.set_defaults(func=_describe)
    delete = add_parser(actions, "delete", "delete topics: every broker hosting a partition removes its log",
                        bootstrap=True)
    delete.add_argument("topic", nargs="+")
    delete.add_argument("--wait-s", type=float, default=30.0,
                        help="how long to wait for the brokers to finish (0: only mark the topics)")
    delete.set_defaults(func=_delete)
    elect = add_parser(actions, "elect-leaders", "move leadership back to each partition's preferred replica")
    elect.add_argument("topic", nargs="*", help="topics (default: all)")
    elect.add_argument("--wait-s", type=float, default=30.0, help="how long to wait for the controller")
    elect.add_argument("--type", choices=("preferred", "unclean"), default="preferred",
                       help="preferred: back to the first replica; unclean: a live replica, in sync or not, for "
                            "partitions without a live leader (may lose acknowledged records)")
    elect.set_defaults(func=_elect_leaders)
    reassign = add_parser(actions, "reassign", "move partitions between brokers (kafka-reassign-partitions' JSON)",
                          bootstrap=True)
    mode = reassign.add_mutually_exclusive_group(required=True)
    for name, text in (("generate", "print a plan moving the topics of --topics-to-move-json-file onto "
                                    "--broker-list"),
                       ("execute", "start the plan of --reassignment-json-file (the controller carries it out)"),
                       ("verify", "whether each partition of the plan completed"),
                       ("cancel", "put the plan's partitions still moving back on their original replicas")):
        mode.add_argument(f"--{name}", action="store_true", help=text)
    reassign.add_argument("--reassignment-json-file", metavar="FILE")
    reassign.add_argument("--topics-to-move-json-file", metavar="FILE")
    reassign.add_argument("--broker-list", metavar="ID[,ID...]")
    reassign.add_argument("--throttle", type=int, default=-1, metavar="BYTES_PER_S",
                          help="with --execute: hold the moving replicas' replication to this rate (the moving "
                               "brokers' *.replication.throttled.rate, the topics' *.replication.throttled.replicas)"
                               "; --verify removes them once every partition completed")
    reassign.add_argument("--preserve-throttles", action="store_true",
                          help="with --verify: leave the throttles in place")
    reassign.set_defaults(func=reassign_command.run)
    grow = add_parser(actions, "alter", "add partitions to a topic (kafka-topics --alter --partitions)",
                      bootstrap=True)
    grow.add_argument("topic")
    grow.add_argument("--partitions", type=int, required=True, metavar="N",
                      help="the new partition count: more than the current one (partitions cannot be removed)")
    grow.set_defaults(func=_alter_partitions)
    alter = add_parser(actions, "alter-config", "set or remove topic config overrides; brokers apply them live",
                       bootstrap=True)
    alter.add_argument("topic")
    alter.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    alter.add_argument("--delete", action="append", default=[], metavar="KEY")
    alter.set_defaults(func=_alter_config)


def _key_values(args: argparse.Namespace, items: list[str], option: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            usage_error(args, f"{option} {item!r}: expected KEY=VALUE")
        pairs[key.strip()] = value
    return pairs


def _create(args: argparse.Namespace) -> int:
    pairs = _key_values(args, args.topic_config, "--topic-config")
    if args.bootstrap_server is not None:  # CreateTopics (metaq/cli/broker_topics.py); the broker validates
        partitions = broker_topics.create(args, pairs)
    else:
        from metaq.broker.topic_config import validate_topic_config
        from metaq.broker.topics import create_topic

        config = validate_topic_config(pairs)
        with open_admin(args) as admin:
            partitions = create_topic(admin.layout, args.topic, args.partitions,
                                      replication_factor=args.replication_factor, config=config).partitions
    leaders = {p: r[0] for p, r in sorted(partitions.items())}
    emit(args, {"topic": args.topic, "partitions": len(leaders), "leaders": {str(p): b for p, b in leaders.items()}},
         lambda: f"Created topic {args.topic} with {len(leaders)} partitions (partition:leader "
                 f"{', '.join(f'{p}:{b}' for p, b in leaders.items())})")
    return 0


def _list(args: argparse.Namespace) -> int:
    if args.under_replicated:
        return _list_unhealthy(args)
    with open_admin(args) as admin:
        topics = admin.list_topics()
    errors = any(t.error for t in topics)  # the ERROR column only when a topic's node does not decode
    emit(args, {"topics": [t.to_json() for t in topics]},
         lambda: table(["TOPIC", "PARTITIONS", "ERROR"] if errors else ["TOPIC", "PARTITIONS"],
                       [(t.topic, t.partitions, t.error) if errors else (t.topic, t.partitions) for t in topics])
         if topics else "No topics.")
    return 0


def _list_unhealthy(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        found = admin.unhealthy_partitions()
    emit(args, {"partitions": [p.to_json() for p in found]},
         lambda: table(["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "STATUS"],
                       [(p.topic, p.partition, p.leader, ",".join(map(str, p.replicas)),
                         ",".join(map(str, p.isr)) or None, p.status) for p in found])
         if found else "No under-replicated or offline partitions.")
    return 0


def _describe(args: argparse.Namespace) -> int:
    from metaq.admin.cleaner_metrics import parse_source

    sources = [parse_source(text) for text in args.metrics_url]  # a bad value is refused before connecting
    with open_admin(args) as admin:
        names = args.topic or _readable_topics(admin.list_topics())
        with ProgressBar("describing topics", len(names)) as bar:
            details = []
            for name in names:
                details.append(admin.describe_topic(name))
                bar.update()
    details = filter_partitions(details, under_min_isr=args.under_min_isr, unavailable=args.unavailable)
    cleaning = _cleaning(args, details, sources)
    emit(args, {"topics": [_with_cleaning(d.to_json(), cleaning) for d in details]},
         lambda: render(details, cleaning) if details or not (args.under_min_isr or args.unavailable)
         else "No under-min-isr partitions." if args.under_min_isr else "No unavailable partitions.")
    return 0


@dataclass(frozen=True)
class Cleaning:
    """What ``topics describe`` shows of log compaction: each topic's cleanup policy (None: not known, ZooKeeper
    mode without an override: the broker's ``log.cleanup.policy`` applies), and the dirty ratio of compacted
    partitions as their leader's metrics endpoint reports it (docs/compaction.md)."""

    policies: dict[str, str | None] = field(default_factory=dict)
    ratios: dict[tuple[str, int], float] = field(default_factory=dict)

    def compacted(self, topic: str) -> bool:
        return "compact" in (self.policies.get(topic) or "")


def _cleaning(args: argparse.Namespace, details: list[TopicDetail], sources: list[MetricsSource]) -> Cleaning:
    if args.bootstrap_server is not None:
        policies = broker_topics.cleanup_policies(args, [d.topic for d in details])
    else:
        policies = {d.topic: d.config.get("cleanup.policy") for d in details}
    cleaning = Cleaning(policies)
    if not sources:
        return cleaning
    from metaq.admin.cleaner_metrics import dirty_ratios

    leaders = {(d.topic, p.partition): p.leader for d in details for p in d.partitions}
    for source in sources:
        for key, ratio in dirty_ratios(source.url).items():
            if key in leaders and (source.broker_id is None or source.broker_id == leaders[key]):
                cleaning.ratios.setdefault(key, ratio)
    return cleaning


def _with_cleaning(described: dict[str, Any], cleaning: Cleaning) -> dict[str, Any]:
    topic = described["topic"]
    described["cleanup_policy"] = cleaning.policies.get(topic)
    if cleaning.compacted(topic):
        for partition in described["partitions"]:
            partition["dirty_ratio"] = cleaning.ratios.get((topic, partition["partition"]))
    return described


def _readable_topics(topics: list[TopicSummary]) -> list[str]:
    """The topics to describe when none is named: those whose node decodes (each other one named on stderr)."""
    for t in topics:
        if t.error is not None:
            note(f"warning: left out topic {t.topic}: {t.error}")
    return [t.topic for t in topics if t.error is None]


def filter_partitions(details: list[TopicDetail], *, under_min_isr: bool = False,
                      unavailable: bool = False) -> list[TopicDetail]:
    """As kafka-topics --describe with --under-min-isr-partitions / --unavailable-partitions: only the matching
    partitions, and only the topics that have any."""
    if not (under_min_isr or unavailable):
        return details
    kept = [replace(d, partitions=d.under_min_isr() if under_min_isr else d.unavailable(),
                    total_partitions=d.partition_count) for d in details]
    return [d for d in kept if d.partitions]


def render(details: list[TopicDetail], cleaning: Cleaning | None = None) -> str:
    if not details:
        return "No topics."
    cleaning = cleaning or Cleaning()
    parts = []
    for d in details:
        config = ",".join(f"{k}={v}" for k, v in sorted(d.config.items())) or "-"
        moving = any(p.adding or p.removing for p in d.partitions)  # columns only while a reassignment runs
        compacted = cleaning.compacted(d.topic)
        ratio = cleaning.ratios.get
        rows = [(p.partition, p.leader, ",".join(map(str, p.replicas)), ",".join(map(str, p.isr)) or None,
                 p.status, p.log_start, p.log_end, p.messages, p.error,
                 *((",".join(map(str, p.adding)) or None, ",".join(map(str, p.removing)) or None) if moving else ()),
                 *((_ratio(ratio((d.topic, p.partition))),) if compacted else ()))
                for p in d.partitions]
        policy = cleaning.policies.get(d.topic) or "broker default"
        parts.append(f"Topic {d.topic}: {d.partition_count} partitions, replication factor {d.replication_factor}, "
                     f"config {config}, cleanup.policy {policy}\n" + table(
            ["PARTITION", "LEADER", "REPLICAS", "ISR", "STATUS", "LOG-START-OFFSET", "LOG-END-OFFSET", "MESSAGES",
             "ERROR", *(("ADDING", "REMOVING") if moving else ()), *(("DIRTY-RATIO",) if compacted else ())], rows))
    return "\n\n".join(parts)


def _ratio(value: float | None) -> str | None:
    return None if value is None else f"{value:.2f}"


def _delete(args: argparse.Namespace) -> int:
    if args.bootstrap_server is not None:  # DeleteTopics (metaq/cli/broker_topics.py)
        pending = broker_topics.delete(args)
    else:
        with open_admin(args) as admin:
            pending = admin.delete_topics(args.topic, wait_s=args.wait_s)
    if pending and args.wait_s > 0:
        raise ZooKeeperError(f"topics {', '.join(pending)} are marked for deletion, but the brokers hosting their"
                             f" partitions did not finish within {args.wait_s:g} s (is one of them down?)")
    deleted = [t for t in args.topic if t not in pending]
    emit(args, {"deleted": deleted, "marked": pending},
         lambda: "\n".join([f"Deleted topic {t}" for t in deleted]
                           + [f"Topic {t} is marked for deletion" for t in pending]))
    return 0


def _elect_leaders(args: argparse.Namespace) -> int:
    if args.type == "unclean":
        return _elect_unclean(args)
    with open_admin(args) as admin:
        leaders = admin.elect_preferred_leaders(args.topic, wait_s=args.wait_s)
    rows = sorted(leaders.items())
    emit(args, {"leaders": [{"topic": t, "partition": p, "leader": b} for (t, p), b in rows]},
         lambda: table(["TOPIC", "PARTITION", "LEADER"], [(t, p, b) for (t, p), b in rows]) if rows
         else "No replicated partitions.")
    return 0


def _alter_partitions(args: argparse.Namespace) -> int:
    """As kafka-topics --alter --partitions: the new partitions are placed on the live brokers with the
    topic's replication factor (the path CreatePartitions takes at a broker); fewer or equal is an error."""
    if args.bootstrap_server is not None:  # CreatePartitions (metaq/cli/broker_topics.py)
        have, partitions = broker_topics.add_partitions(args)
    else:
        from metaq.broker.topics import add_partitions

        with open_admin(args) as admin:
            before = admin.layout.topic_assignment(args.topic)
            partitions = add_partitions(admin.layout, args.topic, args.partitions).partitions
        have = len(before.partitions) if before is not None else 0
    added = {p: r for p, r in sorted(partitions.items()) if p >= have}
    emit(args, {"topic": args.topic, "partitions": len(partitions),
                "added": {str(p): list(r) for p, r in added.items()}},
         lambda: f"Topic {args.topic}: {have} -> {len(partitions)} partitions (partition:replicas "
                 f"{', '.join(f'{p}:' + ','.join(map(str, r)) for p, r in added.items())})")
    return 0


def _alter_config(args: argparse.Namespace) -> int:
    if not args.set and not args.delete:
        usage_error(args, "nothing to change: give --set KEY=VALUE or --delete KEY")
    updates = _key_values(args, args.set, "--set")
    if args.bootstrap_server is not None:  # IncrementalAlterConfigs (metaq/cli/broker_topics.py)
        config = broker_topics.alter_config(args, updates)
    else:
        with open_admin(args) as admin:
            config = admin.alter_topic_config(args.topic, updates, args.delete)
    emit(args, {"topic": args.topic, "config": config},
         lambda: f"Topic {args.topic}: config {','.join(f'{k}={v}' for k, v in sorted(config.items())) or '-'}")
    return 0


def _elect_unclean(args: argparse.Namespace) -> int:
    from metaq.admin.reassignment import elect_leaders_unclean

    with open_admin(args) as admin:
        names = args.topic or admin.layout.topics()
        partitions = [(t, p) for t in names for p in admin.layout.topic_partition_ids([t]).get(t) or ()]
        errors = elect_leaders_unclean(admin.layout, partitions, security=admin.security)
        states = admin.layout.partition_states(errors)
    rows = [(t, p, s.leader if s is not None else -1, _ELECTION.get(e, f"error {e}"))
            for (t, p), e in sorted(errors.items()) for s in (states.get((t, p)),)]
    emit(args, {"leaders": [{"topic": t, "partition": p, "leader": b, "result": r} for t, p, b, r in rows]},
         lambda: table(["TOPIC", "PARTITION", "LEADER", "RESULT"], rows) if rows else "No partitions.")
    return 0 if all(e in (0, 84) for e in errors.values()) else 1


_ELECTION = {0: "elected", 84: "not needed", 83: "no eligible replica", 3: "unknown partition"}
