"""Consumer groups as separate processes, a steady producer, and the offline checks of their event logs.

The pieces ``metaq demo`` uses live in :mod:`metaq.cli.demo_harness` and are re-exported here; this module
adds the test-only waits, monitors and the gated proxy.

    group = GroupHarness(zk_connect, "g", "t", work_dir)
    a = group.add_member(); b = group.add_member()
    group.wait_stable(partitions=12)
    a.kill()                                   # SIGKILL; also pause()/resume()/stop()
    report = check_delivery(group.events(), acked)

Members are ``metaq verifiable-consumer`` processes; each writes JSON lines (see that module), with
``time.monotonic()`` stamps comparable across processes.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from metaq.cli.demo_harness import (
    ConsumerProcess,
    DeliveryReport,
    Event,
    GroupHarness,
    SteadyProducer,
    check_delivery,
    ownership_problem,
)
from metaq.config import Properties
from metaq.consumer import Consumer, ConsumerTimeoutError
from metaq.consumer.message import MessageAndMetadata
from metaq.errors import MetaqError
from metaq.testing.wait import wait_until
from zk_layout import ZkLayout

__all__ = [
    "ConsumerProcess",
    "DeliveryReport",
    "Event",
    "GatedProxy",
    "GroupHarness",
    "OffsetMonitor",
    "SteadyProducer",
    "StreamReader",
    "check_delivery",
    "consume_and_commit",
    "drain_stream",
    "log_end_offsets",
    "ownership_problem",
    "wait_consuming",
    "wait_drained",
]


def hook_events(member: ConsumerProcess) -> list[dict[str, Any]]:
    """The member's partitions_assigned / _revoked / _lost events only: the waits poll this often, and a
    broker-coordinated metaq member logs a records_consumed line per record."""
    with open(member.events_path) as log:
        lines = [line for line in log if '"partitions_' in line]
    events = []
    for line in lines:
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut by SIGKILL
    return events


def owned_by_hooks(harness: GroupHarness) -> dict[str, set[int]]:
    """What each live member owns, read from its listener log with both meanings of the hooks: eager
    (revoked names everything, assigned everything) and cooperative (only what moved)."""
    owned: dict[str, set[int]] = {}
    for member in harness.members:
        if not member.alive:
            continue
        current: set[int] = set()
        for e in hook_events(member):
            parts = {p["partition"] for p in e.get("partitions", ())}
            if e["name"] == "partitions_assigned":
                current |= parts
            elif e["name"] in ("partitions_revoked", "partitions_lost"):
                current -= parts
        owned[member.name] = current
    return owned


def wait_consuming(harness: GroupHarness, partitions: Iterable[int], since: float, timeout: float) -> None:
    """Wait until the group reported records of every one of ``partitions`` after ``since`` (monotonic)."""
    wanted = set(partitions)

    def fresh() -> set[int]:
        return {part["partition"] for e in harness.events() if e["name"] == "records_consumed" and e["time"] > since
                for part in e["partitions"]}

    wait_until(lambda: wanted <= fresh(), timeout, f"the group to consume partitions {sorted(wanted - fresh())}")


def wait_drained(harness: GroupHarness, acked: Iterable[tuple[int, int]], timeout: float) -> DeliveryReport:
    """Wait until every acknowledged message was consumed at least once; returns the last report."""
    acked = list(acked)
    report = check_delivery(harness.events(), acked)
    deadline = time.monotonic() + timeout
    while report.missing and time.monotonic() < deadline:
        time.sleep(0.25)
        report = check_delivery(harness.events(), acked)
    return report


def drain_values(stream: Iterator[MessageAndMetadata], expected: int,
                 timeout: float = 60.0) -> dict[tuple[int, int], bytes | None]:
    """Read ``stream`` until ``expected`` messages arrived (a duplicate (partition, offset) fails) or, after a
    quiet spell of consumer.timeout.ms, ``timeout`` seconds passed (0: stop at the first quiet spell); their
    values by (partition, offset)."""
    got: dict[tuple[int, int], bytes | None] = {}
    deadline = time.monotonic() + timeout
    while True:
        try:
            for m in stream:
                assert (m.partition, m.offset) not in got, f"duplicate {m.partition}/{m.offset}"
                got[(m.partition, m.offset)] = m.value
                if len(got) >= expected:
                    return got
        except ConsumerTimeoutError:
            pass
        if time.monotonic() >= deadline:
            return got


def drain_stream(consumer: Consumer, topic: str, count: int, *, linger: float = 0.0,
                 timeout: float = 30.0) -> set[tuple[int, int]]:
    """``count`` messages from one stream of ``consumer`` (a duplicate fails), then ``linger`` seconds more to
    catch any extra (re-delivered) one; quiet spells of consumer.timeout.ms are waited out (a loaded machine),
    up to ``timeout``."""
    [stream] = consumer.create_message_streams({topic: 1})[topic]
    got: set[tuple[int, int]] = set()
    deadline = time.monotonic() + timeout
    linger_until: float | None = None
    while time.monotonic() < (deadline if linger_until is None else linger_until):
        try:
            m = next(stream)
        except ConsumerTimeoutError:
            continue
        assert (m.partition, m.offset) not in got, f"duplicate {m.partition}/{m.offset}"
        got.add((m.partition, m.offset))
        if len(got) >= count and linger_until is None:
            if not linger:
                break
            linger_until = time.monotonic() + linger
    return got


class OffsetMonitor(threading.Thread):
    """Polls a group's committed offsets in ZooKeeper and records every one that moves backwards (I5),
    independently of what the members report. ZooKeeper errors (a restart) are counted and skipped."""

    def __init__(self, layout: ZkLayout, group: str, interval: float = 0.05) -> None:
        super().__init__(name=f"offset-monitor-{group}", daemon=True)
        self._layout = layout
        self._group = group
        self._interval = interval
        self._stop_event = threading.Event()
        self.last: dict[tuple[str, int], int] = {}
        self.backwards: list[str] = []
        self.polls = 0
        self.errors = 0

    def run(self) -> None:
        while not self._stop_event.wait(self._interval):
            self.poll()

    def poll(self) -> None:
        try:
            offsets = self._layout.offsets(self._group)
        except MetaqError:
            self.errors += 1
            return
        self.polls += 1
        for key, offset in offsets.items():
            prev = self.last.get(key)
            if prev is not None and offset < prev:
                self.backwards.append(f"{key[0]}-{key[1]}: committed offset went from {prev} to {offset}")
            if prev is None or offset > prev:
                self.last[key] = offset

    def stop(self) -> None:
        self._stop_event.set()
        self.join(10)
        self.poll()  # one last look after everything settled


def consume_and_commit(consumer: Consumer, stream: Iterator[MessageAndMetadata], partitions: set[int],
                       at_least: int) -> dict[int, int]:
    """Read ``stream`` until every partition in ``partitions`` gave a message and ``at_least`` in total, then
    commit; returns the next offset per partition (what the commit wrote), so that a test knows the exact lag."""
    nxt: dict[int, int] = {}
    count = 0
    try:
        while count < at_least or set(nxt) != partitions:
            message = next(stream)
            nxt[message.partition] = message.offset + 1
            count += 1
    except ConsumerTimeoutError as e:
        raise AssertionError(f"{consumer.consumer_id} got {count} messages ({nxt}) and then nothing") from e
    consumer.commit_offsets()
    return nxt


def log_end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """partition -> log end offset, as the broker answers ListOffsets(latest)."""
    from kafka.protocol.consumer import ListOffsetsRequest

    from metaq.client.connection import BrokerConnection

    host, port = bootstrap.rsplit(":", 1)
    conn = BrokerConnection(host, int(port), client_id="metaq-test")
    try:
        conn.connect()
        response = conn.send(ListOffsetsRequest, {
            "replica_id": -1, "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [{"partition_index": p, "timestamp": -1}
                                                      for p in range(partitions)]}]})
    finally:
        conn.close()
    result = {}
    for t in response.topics:
        for part in t.partitions:
            if part.error_code:
                raise AssertionError(f"ListOffsets {topic}-{part.partition_index}: error {part.error_code}")
            result[part.partition_index] = part.offset
    return result


class GatedProxy:
    """A loopback TCP proxy in front of a server, with a gate.

    Open, it forwards bytes both ways; closed, it drops the connections it forwards and accepts then at once
    closes new ones, so clients see a dead server and retry. Tests put it in front of a ZooKeeper they
    restart and open it only once the server serves: ZooKeeper 3.9 binds its port before it loads its
    database, and a connection accepted in between can hang unanswered (an NPE on close) for a client's
    whole handshake timeout, i.e. its session timeout, which would make the test's outcome a coin toss.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._open = threading.Event()
        self._open.set()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._thread = threading.Thread(target=self._accept_loop, name=f"proxy-{self.port}", daemon=True)
        self._thread.start()

    def open(self) -> None:
        self._open.set()

    def close(self) -> None:
        """Refuse new connections and drop the forwarded ones."""
        self._open.clear()
        with self._lock:
            pairs, self._pairs = self._pairs, set()
        for pair in pairs:
            for sock in pair:
                _close_socket(sock)

    def stop(self) -> None:
        self._stopped.set()
        self.close()
        self._thread.join(5)
        self._listener.close()

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._open.is_set():
                _close_socket(client)
                continue
            try:
                upstream = socket.create_connection(self._target, timeout=2)
            except OSError:
                _close_socket(client)
                continue
            for sock in (client, upstream):
                sock.settimeout(None)
            pair = (client, upstream)
            with self._lock:
                self._pairs.add(pair)
            for src, dst in (pair, pair[::-1]):
                threading.Thread(target=self._pump, args=(src, dst, pair), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, pair: tuple[socket.socket, socket.socket]) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._pairs.discard(pair)
            for sock in pair:
                _close_socket(sock)


def _close_socket(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class StreamReader:
    """One in-process member reading its single stream of ``topic`` on a thread, recording (partition, offset)
    and telling ``on_message`` (if given) of each message as it is delivered."""

    def __init__(self, properties: Properties, topic: str,
                 on_message: Callable[[StreamReader, MessageAndMetadata], None] | None = None) -> None:
        self.consumer = Consumer({"consumer.timeout.ms": 100, **properties})
        [self.stream] = self.consumer.create_message_streams({topic: 1})[topic]
        self.seen: list[tuple[int, int]] = []
        self._on_message = on_message
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, name=f"reader-{self.consumer.consumer_id}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                message: MessageAndMetadata = next(self.stream)
            except ConsumerTimeoutError:
                continue
            except StopIteration:
                return
            self.seen.append((message.partition, message.offset))
            if self._on_message is not None:
                self._on_message(self, message)

    def owned(self) -> set[int]:
        return {p for _, p in self.consumer.state.owned}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.consumer.shutdown()
