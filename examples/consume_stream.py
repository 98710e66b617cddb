"""Consume a topic as a member of a ZooKeeper-coordinated group, with Kafka 0.8's stream API.

    .venv/bin/python examples/consume_stream.py --topic clicks [--group etl] [--zookeeper 127.0.0.1:2181]

Prints ``partition offset value`` per message. Ctrl-C (or SIGTERM) stops it: the loop ends, what was handed
out is committed, the partitions are released and the member leaves the group. ``--max-messages N`` stops
after N messages (as Kafka's console consumer's option). Start it twice with the same group to see the
partitions split between the two (``metaq owners GROUP --zookeeper ...`` shows who owns what).
"""

from __future__ import annotations

import argparse

from metaq.consumer import Consumer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zookeeper", default="127.0.0.1:2181")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", default="example-stream")
    parser.add_argument("--max-messages", type=int, default=None)
    args = parser.parse_args()
    config = {"group.id": args.group, "zookeeper.connect": args.zookeeper,
              "auto.offset.reset": "smallest"}  # a new group starts at the beginning
    seen = 0
    with Consumer(config) as consumer:
        [stream] = consumer.create_message_streams({args.topic: 1})[args.topic]
        consumer.stop_on_signals()
        for message in stream:
            print(message.partition, message.offset, message.value.decode(errors="replace"), flush=True)
            seen += 1
            if args.max_messages is not None and seen >= args.max_messages:
                break
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
