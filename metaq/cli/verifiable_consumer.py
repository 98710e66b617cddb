"""``metaq verifiable-consumer``: a group member that reports what it does as JSON lines on stdout.

Like Kafka's VerifiableConsumer: tests and the demo run several of these as separate processes and
check the events offline (no loss, bounded duplicates, exclusive ownership, commit safety). Every event
carries ``time`` from ``time.monotonic()``, comparable across processes on one machine.

Events: startup_complete, partitions_assigned, partitions_revoked, records_consumed (runs of consecutive
offsets per partition, with the times of their first and last delivery), offsets_committed, rebalance_failed,
session_state (SUSPENDED, LOST, CONNECTED), shutdown_complete.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from metaq.cli.subparsers import SubParsers
from metaq.errors import ConsumerRebalanceFailedError, ConsumerTimeoutError

if TYPE_CHECKING:  # the consumer imports kazoo and the Kafka client: `metaq verifiable-consumer --help` needs none
    from kazoo.protocol.states import WatchedEvent

    from metaq.consumer.offset_store import CommitResult, OffsetStore, TopicPartition
    from metaq.consumer.streams import KafkaStream

_print_lock = threading.Lock()
RUN_GAP_S = 0.5  # a pause in delivery longer than this starts a new records_consumed run


def emit(name: str, **fields: object) -> None:
    line = json.dumps({"name": name, "time": time.monotonic(), **fields}, separators=(",", ":"))
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


@dataclass
class _Run:
    """One partition's run of consecutive offsets delivered without a pause: what ``records_consumed`` reports."""

    min_offset: int
    max_offset: int
    count: int
    first: float
    """When its first record was delivered (time.monotonic())."""
    last: float


class ConsumedReport:
    """records_consumed runs, batched, and written before any commit can cover them.

    The stream counts a message as consumed when it hands it out (Kafka 0.8's iterator), and the
    auto-commit and rebalance threads commit that position at any time. A member killed with runs
    still batched here would have committed records it never reported, which the checker must count as
    lost: so every commit first flushes this batch (as Kafka's VerifiableConsumer prints records_consumed
    before it commits them). Only the instant between the stream handing a message out and ``add``
    remains, the at-most-once window of the one in-flight message that 0.8's iterator documents."""

    def __init__(self, every_s: float) -> None:
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, int], _Run] = {}
        self._every_s = every_s
        self._last = time.monotonic()

    def add(self, topic: str, partition: int, offset: int) -> None:
        now = time.monotonic()
        with self._lock:
            key = (topic, partition)
            span = self._pending.get(key)
            # A rewind or gap, or a pause in delivery (a SIGSTOP): report runs separately, so that each run's
            # firstTime..lastTime says when its records were delivered.
            if span is not None and (offset != span.max_offset + 1 or now - span.last > RUN_GAP_S):
                self._flush()
                span = None
            if span is None:
                span = self._pending[key] = _Run(offset, offset, 0, now, now)
            span.max_offset = offset
            span.count += 1
            span.last = now

    def tick(self, idle: bool) -> None:
        """Flush when idle or when the batch is old enough."""
        with self._lock:
            if self._pending and (idle or time.monotonic() - self._last > self._every_s):
                self._flush()

    def flush(self) -> None:
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        self._last = time.monotonic()
        if self._pending:
            emit("records_consumed", partitions=[
                {"topic": t, "partition": p, "minOffset": run.min_offset, "maxOffset": run.max_offset,
                 "count": run.count, "firstTime": run.first, "lastTime": run.last}
                for (t, p), run in sorted(self._pending.items(), key=lambda item: item[0])])
            self._pending.clear()


class ReportingStore:
    """Wraps the real offset store and reports every commit and its outcome."""

    def __init__(self, inner: OffsetStore, before_commit: Callable[[], None] = lambda: None) -> None:
        self._inner = inner
        self._before_commit = before_commit

    def take_ownership(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        return self._inner.take_ownership(partitions)

    def commit(self, offsets: Mapping[TopicPartition, int]) -> CommitResult:
        # ``started``: a commit that straddles a pause (SIGSTOP) is reported after it, so checkers that
        # ask "did this member commit after losing its session?" must look at when the commit began.
        started = time.monotonic()
        self._before_commit()
        result = self._inner.commit(offsets)
        if result.committed or result.lost:
            emit("offsets_committed", started=started,
                 offsets=[{"topic": t, "partition": p, "offset": offsets[(t, p)]} for t, p in result.committed],
                 lost=[{"topic": t, "partition": p} for t, p in sorted(result.lost)])
        return result

    def release(self, partitions: Iterable[TopicPartition]) -> None:
        self._inner.release(partitions)

    def owned(self) -> set[TopicPartition]:
        return self._inner.owned()

    def changed_behind(self, partitions: Iterable[TopicPartition],
                       watch: Callable[[WatchedEvent], None] | None = None) -> dict[TopicPartition, int | None]:
        return self._inner.changed_behind(partitions, watch)

    def close(self) -> None:
        self._inner.close()


class ReportingListener:
    """Reports ownership changes. Records consumed before a change are reported before it (as before a
    commit), so that a checker can tell which assignment epoch every records_consumed belongs to."""

    def __init__(self, report: ConsumedReport) -> None:
        self._report = report

    def before_release(self, partitions: Mapping[str, set[int]]) -> None:
        self._report.flush()
        emit("partitions_revoked", partitions=[{"topic": t, "partition": p} for t, ps in partitions.items()
                                               for p in sorted(ps)])

    def assigned(self, consumer_id: str, assignment: Mapping[str, Mapping[int, str]]) -> None:
        self._report.flush()
        mine = [{"topic": t, "partition": p} for t, parts in assignment.items() for p, tid in parts.items()
                if tid.rsplit("-", 1)[0] == consumer_id]
        emit("partitions_assigned", partitions=mine)

    def lost(self, partitions: Mapping[str, set[int]]) -> None:
        """Partitions the member had to assume were someone else's (group.coordination=kafka)."""
        self._report.flush()
        emit("partitions_lost", partitions=[{"topic": t, "partition": p} for t, ps in partitions.items()
                                            for p in sorted(ps)])

    def rebalance_failed(self, error: ConsumerRebalanceFailedError) -> None:
        emit("rebalance_failed", error=str(error))


def register(sub: SubParsers) -> None:
    parser = sub.add_parser("verifiable-consumer", help="a group member reporting its work as JSON lines")
    parser.add_argument("--zookeeper", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                        help="consumer property, e.g. auto.commit.interval.ms=500")
    parser.add_argument("--max-messages", type=int, default=-1)
    parser.add_argument("--report-every-ms", type=int, default=200, help="how often to batch records_consumed")
    parser.set_defaults(func=_run)


def report_interval_s(group_coordination: str, report_every_ms: int) -> float:
    """How long records_consumed runs may be batched. A broker-coordinated member's commits are reported by the
    commit listener, which runs after the OffsetCommit: a batch still held then would be committed unreported
    if the member were killed in between, so such a member reports every record as it takes it, leaving only
    the in-flight message's window (:class:`ConsumedReport`)."""
    return 0.0 if group_coordination == "kafka" else report_every_ms / 1000.0


def _run(args: argparse.Namespace) -> int:
    from metaq.consumer import Consumer, ConsumerConfig
    from metaq.consumer.connector import default_offset_store
    from metaq.signals import TerminationHandler

    props: dict[str, object] = {"group.id": args.group, "zookeeper.connect": args.zookeeper,
                             "consumer.timeout.ms": args.report_every_ms, "auto.offset.reset": "smallest"}
    for item in args.property:
        key, _, value = item.partition("=")
        props[key.strip()] = value.strip()
    config = ConsumerConfig.from_properties(props)
    stop = threading.Event()
    TerminationHandler(stop.set).install()  # the loop below sees it within report-every-ms; twice: exit now
    report = ConsumedReport(report_interval_s(config.group_coordination, args.report_every_ms))
    consumer = Consumer(config, rebalance_listener=ReportingListener(report),
                        offset_store_factory=lambda layout, cfg: ReportingStore(default_offset_store(layout, cfg),
                                                                                report.flush),
                        commit_listener=partial(_report_commit, report))  # group.coordination=kafka
    consumer.add_session_listener(lambda state: emit("session_state", state=state))
    session = consumer.zookeeper_session
    emit("startup_complete", consumer_id=consumer.consumer_id,
         session_id=session[0] if session else None, session_password=session[1].hex() if session else None)
    try:
        [stream] = consumer.create_message_streams({args.topic: 1})[args.topic]
        _consume(stream, stop, args.max_messages, report)
    finally:
        consumer.shutdown()
        emit("shutdown_complete")
    return 0


def _report_commit(report: ConsumedReport, started: float, result: CommitResult) -> None:
    """What ReportingStore reports, for a broker-coordinated member (which commits without a store)."""
    report.flush()
    emit("offsets_committed", started=started,
         offsets=[{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(result.committed.items())],
         lost=[{"topic": t, "partition": p} for t, p in sorted(result.lost)])


def _consume(stream: KafkaStream, stop: threading.Event, max_messages: int, report: ConsumedReport) -> None:
    total = 0
    while not stop.is_set() and (max_messages < 0 or total < max_messages):
        try:
            message = next(stream)
        except ConsumerTimeoutError:
            message = None
        except ConsumerRebalanceFailedError:
            # Reported (rebalance_failed) by the listener; the consumer keeps retrying, so does this member.
            message = None
        except StopIteration:
            break
        if message is not None:
            total += 1
            report.add(message.topic, message.partition, message.offset)
        report.tick(idle=message is None)
    report.flush()
