"""Consume a topic with MetaQ's listener API: metaq runs the loop and calls your listener per message.

    .venv/bin/python examples/consume_listener.py --topic clicks [--group etl] [--zookeeper 127.0.0.1:2181] \
        [--coordination kafka]

A message counts as consumed (and is committed) only once ``receive_message`` returned; one that keeps
raising is retried, then set aside in the recover store (``metaq recover list``) so its partition moves on.
Ctrl-C (or SIGTERM) lets the listener finish its message, commits and leaves the group. ``--coordination kafka``
runs the same listener in a broker-coordinated group (Kafka's group protocol, offsets at the group coordinator:
README, Broker coordination).
"""

from __future__ import annotations

import argparse

from metaq.consumer import MessageAndMetadata, MessageConsumer


class Printer:
    """Called from the dispatch threads (one per stream) and the recover thread: keep it thread-safe."""

    def receive_message(self, message: MessageAndMetadata) -> None:
        print(message.partition, message.offset, message.value.decode(errors="replace"), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zookeeper", default="127.0.0.1:2181")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", default="example-listener")
    parser.add_argument("--coordination", choices=("zookeeper", "kafka"), default="zookeeper")
    args = parser.parse_args()
    config = {"group.id": args.group, "zookeeper.connect": args.zookeeper, "auto.offset.reset": "smallest",
              "group.coordination": args.coordination}
    with MessageConsumer(config) as consumer:
        consumer.stop_on_signals()  # before the first message can arrive: a signal never finds the default handler
        consumer.subscribe(args.topic, 1024 * 1024, Printer()).complete_subscribe()
        consumer.wait()  # messages arrive on the dispatch threads until a signal shuts the consumer down
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
