"""``metaq verifiable-consumer``: a group member that reports what it does as JSON lines on stdout.

Like Kafka's VerifiableConsumer: tests and the demo run several of these as separate processes and
check the events offline (no loss, bounded duplicates, exclusive ownership, commit safety). Every event
carries ``time`` from ``time.monotonic()``, comparable across processes on one machine.

Events: startup_complete, partitions_assigned, partitions_revoked, records_consumed, offsets_committed,
rebalance_failed, session_state, shutdown_complete.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from metaq.consumer import Consumer, ConsumerConfig, ConsumerTimeoutError
from metaq.consumer.connector import default_offset_store
from metaq.consumer.offsets import CommitResult, OffsetStore, TopicPartition
from metaq.consumer.rebalance import ConsumerRebalanceFailedError

_print_lock = threading.Lock()


def emit(name: str, **fields: Any) -> None:
    line = json.dumps({"name": name, "time": time.monotonic(), **fields}, separators=(",", ":"))
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class ReportingStore:
    """Wraps the real offset store and reports every commit and its outcome."""

    def __init__(self, inner: OffsetStore) -> None:
        self._inner = inner

    def take_ownership(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        return self._inner.take_ownership(partitions)

    def commit(self, offsets: Mapping[TopicPartition, int]) -> CommitResult:
        result = self._inner.commit(offsets)
        if result.committed or result.lost:
            emit("offsets_committed",
                 offsets=[{"topic": t, "partition": p, "offset": offsets[(t, p)]} for t, p in result.committed],
                 lost=[{"topic": t, "partition": p} for t, p in sorted(result.lost)])
        return result

    def release(self, partitions: Iterable[TopicPartition]) -> None:
        self._inner.release(partitions)

    def owned(self) -> set[TopicPartition]:
        return self._inner.owned()

    def close(self) -> None:
        self._inner.close()


class ReportingListener:
    def before_release(self, partitions: Mapping[str, set[int]]) -> None:
        emit("partitions_revoked", partitions=[{"topic": t, "partition": p} for t, ps in partitions.items()
                                               for p in sorted(ps)])

    def assigned(self, consumer_id: str, assignment: Mapping[str, Mapping[int, str]]) -> None:
        mine = [{"topic": t, "partition": p} for t, parts in assignment.items() for p, tid in parts.items()
                if tid.rsplit("-", 1)[0] == consumer_id]
        emit("partitions_assigned", partitions=mine)

    def rebalance_failed(self, error: ConsumerRebalanceFailedError) -> None:
        emit("rebalance_failed", error=str(error))


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("verifiable-consumer", help="a group member reporting its work as JSON lines")
    parser.add_argument("--zookeeper", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                        help="consumer property, e.g. auto.commit.interval.ms=500")
    parser.add_argument("--max-messages", type=int, default=-1)
    parser.add_argument("--report-every-ms", type=int, default=200, help="how often to batch records_consumed")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    props: dict[str, Any] = {"group.id": args.group, "zookeeper.connect": args.zookeeper,
                             "consumer.timeout.ms": args.report_every_ms, "auto.offset.reset": "smallest"}
    for item in args.property:
        key, _, value = item.partition("=")
        props[key.strip()] = value.strip()
    config = ConsumerConfig.from_properties(props)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    consumer = Consumer(config, rebalance_listener=ReportingListener(),
                        offset_store_factory=lambda layout, cfg: ReportingStore(default_offset_store(layout, cfg)))
    session = consumer.zookeeper_session
    emit("startup_complete", consumer_id=consumer.consumer_id,
         session_id=session[0] if session else None, session_password=session[1].hex() if session else None)
    try:
        [stream] = consumer.create_message_streams({args.topic: 1})[args.topic]
        _consume(stream, stop, args.max_messages)
    finally:
        consumer.shutdown()
        emit("shutdown_complete")
    return 0


def _consume(stream: Any, stop: threading.Event, max_messages: int) -> None:
    pending: dict[tuple[str, int], list[int]] = {}
    total = 0
    last_report = time.monotonic()
    while not stop.is_set() and (max_messages < 0 or total < max_messages):
        try:
            message = next(stream)
        except ConsumerTimeoutError:
            message = None
        except StopIteration:
            break
        if message is not None:
            total += 1
            key = (message.topic, message.partition)
            span = pending.get(key)
            if span is not None and message.offset != span[1] + 1:  # a rewind or gap: report runs separately
                _report(pending)
                span = None
            if span is None:
                span = pending[key] = [message.offset, message.offset, 0]
            span[1] = message.offset
            span[2] += 1
        if pending and (message is None or time.monotonic() - last_report > 0.2):
            _report(pending)
            last_report = time.monotonic()
    _report(pending)


def _report(pending: dict[tuple[str, int], list[int]]) -> None:
    if pending:
        emit("records_consumed", partitions=[
            {"topic": t, "partition": p, "minOffset": lo, "maxOffset": hi, "count": n}
            for (t, p), (lo, hi, n) in sorted(pending.items())])
        pending.clear()
