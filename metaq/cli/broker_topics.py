"""``metaq topics create|alter|alter-config|delete --bootstrap-server``: the changes made through the brokers.

CreateTopics, CreatePartitions, IncrementalAlterConfigs and DeleteTopics (metaq.admin.broker_topics), as
``kafka-topics --bootstrap-server`` and ``kafka-configs --bootstrap-server`` send them; metaq/cli/topics.py
prints the results as in ZooKeeper mode. Imports happen in the functions: ``metaq topics --help`` loads no
client.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from metaq.cli.output import command_security, quiet_libraries, usage_error

if TYPE_CHECKING:
    from metaq.admin.broker_topics import BrokerTopics

Replicas = dict[int, tuple[int, ...]]


def _topics(args: argparse.Namespace) -> BrokerTopics:
    from metaq.admin.bootstrap import BootstrapLayout
    from metaq.admin.broker_topics import BrokerTopics

    if args.zookeeper or args.config:
        usage_error(args, "give either --bootstrap-server or --zookeeper/--config, not both")
    security = command_security(args)
    quiet_libraries()
    return BrokerTopics(BootstrapLayout.connect(args.bootstrap_server, security))


def cleanup_policies(args: argparse.Namespace, topics: list[str]) -> dict[str, str | None]:
    """Each topic's ``cleanup.policy`` as its brokers apply it (DescribeConfigs: override or broker default)."""
    brokers = _topics(args)
    return {topic: brokers.config_value(topic, "cleanup.policy") for topic in topics}


def create(args: argparse.Namespace, config: dict[str, str]) -> Replicas:
    """The new topic's replicas per partition, once each partition has a leader."""
    return _topics(args).create(args.topic, args.partitions, replication_factor=args.replication_factor,
                                config=config)


def add_partitions(args: argparse.Namespace) -> tuple[int, Replicas]:
    """The partition count before, and every partition's replicas after."""
    topics = _topics(args)
    before = topics.layout.refresh().assignments.get(args.topic)
    after = topics.add_partitions(args.topic, args.partitions)
    return (len(before.partitions) if before is not None else 0), after


def alter_config(args: argparse.Namespace, updates: dict[str, str]) -> dict[str, str]:
    """The topic's overrides after the change."""
    return _topics(args).alter_config(args.topic, updates, args.delete)


def delete(args: argparse.Namespace) -> list[str]:
    """The topics still pending after ``--wait-s``."""
    return _topics(args).delete(args.topic, wait_s=args.wait_s)
