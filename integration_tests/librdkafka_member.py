"""A confluent-kafka (librdkafka) group member in its own process, reporting as ``metaq verifiable-consumer`` does
(JSON lines on stdout: partitions_assigned / partitions_revoked / partitions_lost with the partitions each
callback names, records_consumed before offsets_committed), so that metaq.cli.demo_harness.check_delivery can
check a mixed group. Commits synchronously after each batch it consumed and in on_revoke.

    python librdkafka_member.py BOOTSTRAP GROUP TOPIC ASSIGNOR SESSION_MS
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import confluent_kafka


def emit(name: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"name": name, "time": time.monotonic(), **fields}) + "\n")
    sys.stdout.flush()


def _parts(partitions: list[Any]) -> list[dict[str, Any]]:
    return [{"topic": tp.topic, "partition": tp.partition} for tp in partitions]


def commit(consumer: Any, offsets: list[Any] | None) -> None:
    """Synchronous commit (of ``offsets``, or of every position), reported as offsets_committed."""
    if offsets == []:
        return
    started = time.monotonic()
    try:
        done = (consumer.commit(asynchronous=False) if offsets is None
                else consumer.commit(offsets=offsets, asynchronous=False)) or []
    except confluent_kafka.KafkaException as e:
        emit("commit_failed", error=str(e))
        return
    emit("offsets_committed", started=started,
         offsets=[{"topic": tp.topic, "partition": tp.partition, "offset": tp.offset} for tp in done
                  if tp.offset >= 0], lost=[])


def main() -> None:
    bootstrap, group, topic, assignor, session_ms = sys.argv[1:6]
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "partition.assignment.strategy": assignor,
        "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": int(session_ms),
        "heartbeat.interval.ms": 300, "topic.metadata.refresh.interval.ms": 1000})

    def on_assign(_c: Any, partitions: list[Any]) -> None:
        emit("partitions_assigned", partitions=_parts(partitions))

    def on_revoke(c: Any, partitions: list[Any]) -> None:
        # what was consumed since the last commit: committed now, in the generation the revocation belongs to
        # (a commit made while the group rebalanced may have been refused with ILLEGAL_GENERATION)
        commit(c, [tp for tp in c.position(partitions) if tp.offset >= 0])
        emit("partitions_revoked", partitions=_parts(partitions))

    def on_lost(_c: Any, partitions: list[Any]) -> None:
        emit("partitions_lost", partitions=_parts(partitions))

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    emit("startup_complete", consumer_id=f"rdkafka-{group}")
    while True:
        messages = [m for m in consumer.consume(100, 0.2) if m.error() is None]
        if not messages:
            continue
        runs: dict[int, list[int]] = {}
        for m in messages:
            runs.setdefault(m.partition(), []).append(m.offset())
        emit("records_consumed", partitions=[{"topic": topic, "partition": p, "minOffset": min(o), "maxOffset": max(o)}
                                             for p, o in sorted(runs.items())])
        commit(consumer, None)


if __name__ == "__main__":
    main()
