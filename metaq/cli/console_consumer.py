"""``metaq console-consumer --zookeeper Z --group G --topic T [--from-beginning]``: one value per line.

Like Kafka's console consumer: a group member like any other (it registers, owns partitions and
commits offsets). Without ``--group`` a fresh ``console-consumer-<n>`` group is used.
"""

from __future__ import annotations

import argparse
import random
import sys

from metaq.consumer import Consumer, ConsumerConfig, ConsumerTimeoutError


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("console-consumer", help="print a topic's messages, one value per line")
    parser.add_argument("--zookeeper", required=True, help="host:port[/chroot]")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", default=None)
    parser.add_argument("--from-beginning", action="store_true", help="start at the earliest offset "
                        "when the group has no committed offset")
    parser.add_argument("--max-messages", type=int, default=-1)
    parser.add_argument("--timeout-ms", type=int, default=-1, help="exit after this long without a message")
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    props = {
        "group.id": args.group or f"console-consumer-{random.randrange(100000)}",
        "zookeeper.connect": args.zookeeper,
        "auto.offset.reset": "smallest" if args.from_beginning else "largest",
        "consumer.timeout.ms": args.timeout_ms,
        "auto.commit.interval.ms": 1000,
    }
    for item in args.property:
        key, _, value = item.partition("=")
        props[key.strip()] = value.strip()
    count = 0
    with Consumer(ConsumerConfig.from_properties(props)) as consumer:
        [stream] = consumer.create_message_streams({args.topic: 1})[args.topic]
        try:
            for message in stream:
                value = message.value
                sys.stdout.write((value or b"").decode("utf-8", "replace") + "\n")
                count += 1
                if 0 <= args.max_messages <= count:
                    break
        except ConsumerTimeoutError:
            pass
        except BrokenPipeError:
            pass
        finally:
            sys.stdout.flush()
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0
