"""Consume a topic with a batch listener: one call per fetched chunk (at most ``--max-bytes`` of messages).

    .venv/bin/python examples/consume_batch_listener.py --topic clicks [--group etl] [--zookeeper 127.0.0.1:2181]

Suits work that is cheaper in bulk (one database insert per chunk). Raising fails the whole chunk: it is
retried, then split into single messages for retry-then-skip, so messages handled before the failure may be
delivered again. Prints a ``chunk PARTITION FIRST-LAST COUNT`` line per chunk, then each message; Ctrl-C (or
SIGTERM) lets the chunk in hand finish, commits and leaves the group.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from metaq.consumer import MessageAndMetadata, MessageConsumer


class ChunkPrinter:
    def receive_messages(self, batch: Sequence[MessageAndMetadata]) -> None:
        messages = list(batch)  # a MessageBatch builds each message as it is read
        first, last = messages[0], messages[-1]
        lines = [f"chunk {first.partition} {first.offset}-{last.offset} {len(messages)}"]
        lines += [f"{m.partition} {m.offset} {m.value.decode(errors='replace')}" for m in messages]
        print("\n".join(lines), flush=True)  # one write per chunk: chunks of two streams never interleave


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zookeeper", default="127.0.0.1:2181")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", default="example-batch-listener")
    parser.add_argument("--max-bytes", type=int, default=1024 * 1024)
    args = parser.parse_args()
    config = {"group.id": args.group, "zookeeper.connect": args.zookeeper, "auto.offset.reset": "smallest"}
    with MessageConsumer(config) as consumer:
        consumer.stop_on_signals()  # before the first chunk can arrive: a signal never finds the default handler
        consumer.subscribe(args.topic, args.max_bytes, ChunkPrinter()).complete_subscribe()
        consumer.wait()  # chunks arrive on the dispatch threads until a signal shuts the consumer down
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
