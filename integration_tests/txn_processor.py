"""A consume-transform-produce loop with confluent-kafka's transactions, run as a subprocess by
integration_tests/test_transactions_failover.py (so that the test can SIGKILL it).

It reads ``input`` read_committed in group ``group``, writes ``out-<value>`` to ``output`` and commits the consumed
positions with ``send_offsets_to_transaction``, one transaction per poll. Lines on stdout tell the test where it is:
``COMMITTED <n>`` after each commit (n records so far), and with ``--hold-at N``:

* ``HOLD``: the transaction that reaches N records has its output and its offsets sent, not yet committed; it waits
  for the file ``--release`` to exist, then commits;
* ``STALLED``: the next transaction has output written (flushed) and is left open for ever (the test kills it).

Without ``--hold-at`` it exits 0 once its positions reach the end of every input partition.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import confluent_kafka

POLL_S = 0.5


def _say(line: str) -> None:
    print(line, flush=True)


def _caught_up(consumer: confluent_kafka.Consumer) -> bool:
    assignment = consumer.assignment()
    if not assignment:
        return False
    for tp in consumer.position(assignment):
        _, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
        if tp.offset < 0 or tp.offset < high:
            return False
    return True


def _wait_for(path: Path) -> None:
    while not path.exists():
        time.sleep(0.05)


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "input", "output", "group", "transactional_id"):
        parser.add_argument(f"--{name.replace('_', '-')}", required=True)
    parser.add_argument("--hold-at", type=int, default=0)
    parser.add_argument("--release", type=Path)
    args = parser.parse_args()
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": args.bootstrap, "group.id": args.group, "isolation.level": "read_committed",
        "enable.auto.commit": False, "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
    producer = confluent_kafka.Producer({
        "bootstrap.servers": args.bootstrap, "transactional.id": args.transactional_id,
        "transaction.timeout.ms": 60000, "message.timeout.ms": 60000})
    producer.init_transactions(60)
    consumer.subscribe([args.input])
    done = 0
    held = False
    while True:
        records = [m for m in consumer.consume(50, POLL_S) if m.error() is None]
        if not records:
            if args.hold_at == 0 and _caught_up(consumer):
                return 0
            continue
        producer.begin_transaction()
        for m in records:
            producer.produce(args.output, value=b"out-" + (m.value() or b""), key=m.key())
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 60)
        if held:  # the transaction after the held one: left open for the test to kill us in it
            producer.flush(60)
            _say("STALLED")
            while True:
                time.sleep(1)
        if args.hold_at and done + len(records) >= args.hold_at:
            held = True
            _say("HOLD")
            _wait_for(args.release)
        producer.commit_transaction(60)
        done += len(records)
        _say(f"COMMITTED {done}")


if __name__ == "__main__":
    sys.exit(main())
