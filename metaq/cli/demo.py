"""``metaq demo``: the main job on the embedded default.

A real ZooKeeper (child Java process) and three broker processes; a topic with replication factor 3
(min.insync.replicas 2); a steady acks=all producer; a group of consumers in separate processes with a live
view of who owns which partition, which broker leads how many, and the progress; one consumer killed
(SIGKILL) and one added midway; the broker that leads the most partitions killed (SIGKILL) while the group
keeps consuming, and restarted later (it rejoins the ISR); and a final check that every acknowledged
message was consumed, with the duplicate count (duplicates may only come from the killed member's
uncommitted window) and the failover figures. ``--brokers 1`` runs the single-broker demo (no failover).
Set ZOOKEEPER_CONNECT to use an external ZooKeeper.
"""

from __future__ import annotations

import argparse

from metaq.cli.subparsers import SubParsers


def register(sub: SubParsers) -> None:
    parser = sub.add_parser("demo", help="run the demo on an embedded ZooKeeper and three brokers")
    parser.add_argument("--messages", type=_positive, default=None,
                        help="messages to produce (default 30000 with several brokers, 20000 with one)")
    parser.add_argument("--rate", type=float, default=1500.0, help="messages per second (default 1500)")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--consumers", type=int, default=3)
    parser.add_argument("--brokers", type=_positive, default=3,
                        help="broker processes (default 3); with 2 or more the topic is replicated "
                             "(factor min(brokers, 3)) and the busiest leader is killed midway; 1: no failover")
    parser.set_defaults(func=_run)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text!r}")
    return value


def _run(args: argparse.Namespace) -> int:
    from metaq.cli.demo_run import run

    return run(args)
