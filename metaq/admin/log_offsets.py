"""Where each partition's log starts and ends, and which offset a point in time maps to, asked of its leader.

    log_offsets = BrokerLogOffsets(layout)
    log_offsets.watermarks([("clicks", 0)])          # {("clicks", 0): Watermarks(start=0, end=4300, leader=0)}
    log_offsets.offsets_for_time([("clicks", 0)], 1700000000000)   # {("clicks", 0): 4100}
    log_offsets.close()

The leader comes from the partition's ``state`` node and its address from ``/brokers/ids/<id>``, as Kafka's
ConsumerOffsetChecker finds it. A partition whose leader is missing or does not answer gets a
:class:`Watermarks` with ``error`` set instead of raising: an ops view shows what it can.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from kafka.protocol.consumer import ListOffsetsRequest

from metaq.client.connection import BrokerConnection, InFlightRequest
from metaq.errors import BrokerConnectionError, MetaqError, ProtocolError, for_code
from zk_layout import ZkLayout

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

LATEST = -1  # ListOffsets' special timestamps
EARLIEST = -2


@dataclass(frozen=True, slots=True)
class Watermarks:
    """A partition's log start (low watermark) and log end (high watermark) offsets, or why they are unknown."""

    start: int | None
    end: int | None
    leader: int | None = None
    error: str | None = None

    @property
    def known(self) -> bool:
        return self.start is not None and self.end is not None

    @classmethod
    def unknown(cls, error: str, leader: int | None = None) -> Watermarks:
        return cls(None, None, leader, error)


class LogOffsets(Protocol):
    """What the admin functions need from the brokers; tests pass an in-memory fake."""

    def watermarks(self, keys: Iterable[TopicPartition]) -> dict[TopicPartition, Watermarks]: ...

    def offsets_for_time(self, keys: Iterable[TopicPartition], timestamp_ms: int) -> dict[TopicPartition, int]: ...


@dataclass(frozen=True, slots=True)
class _Leader:
    broker_id: int
    host: str
    port: int


class BrokerLogOffsets:
    """:class:`LogOffsets` over ListOffsets requests to the partitions' leaders; see the module docstring.

    One connection per leader is kept until :meth:`close`. Not thread-safe (one CLI command at a time)."""

    def __init__(self, layout: ZkLayout, *, client_id: str = "metaq-admin", request_timeout_ms: int = 10000) -> None:
        self._layout = layout
        self._client_id = client_id
        self._request_timeout_ms = request_timeout_ms
        self._connections: dict[tuple[str, int], BrokerConnection] = {}

    def watermarks(self, keys: Iterable[TopicPartition]) -> dict[TopicPartition, Watermarks]:
        """Start and end offsets of every partition in ``keys``; one pipelined pair of requests per leader."""
        result: dict[TopicPartition, Watermarks] = {}
        for leader, group in self._by_leader(keys, result).items():
            try:
                starts, ends = self._ask(leader, group, EARLIEST), self._ask(leader, group, LATEST)
                answers = self._answers(starts), self._answers(ends)
            except (BrokerConnectionError, ProtocolError) as e:
                self._drop(leader)
                result.update({key: Watermarks.unknown(f"broker {leader.broker_id}: {e}", leader.broker_id)
                               for key in group})
                continue
            for key in group:
                result[key] = _combine(key, leader.broker_id, answers[0], answers[1])
        return result

    def offsets_for_time(self, keys: Iterable[TopicPartition], timestamp_ms: int) -> dict[TopicPartition, int]:
        """The first offset whose record timestamp is at or after ``timestamp_ms``; the log end offset when
        there is none (the time is after the last record), as Kafka's ``--to-datetime`` does. Raises
        :class:`MetaqError` naming the partitions it cannot ask."""
        problems: dict[TopicPartition, Watermarks] = {}
        found: dict[TopicPartition, int] = {}
        pending: list[TopicPartition] = []
        for leader, group in self._by_leader(keys, problems).items():
            try:
                answer = self._answers(self._ask(leader, group, timestamp_ms))
            except (BrokerConnectionError, ProtocolError) as e:
                self._drop(leader)
                raise MetaqError(f"cannot look up offsets by time on broker {leader.broker_id}: {e}") from e
            for key in group:
                offset = _offset_or_raise(key, leader.broker_id, answer)
                if offset >= 0:
                    found[key] = offset
                else:
                    pending.append(key)
        if problems:
            raise MetaqError(_describe_problems(problems))
        for key, marks in self.watermarks(pending).items():
            if marks.end is None:
                raise MetaqError(f"{key[0]}-{key[1]}: {marks.error}")
            found[key] = marks.end
        return found

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()

    # -- plumbing ------------------------------------------------------------------------------------

    def _by_leader(self, keys: Iterable[TopicPartition],
                   problems: dict[TopicPartition, Watermarks]) -> dict[_Leader, list[TopicPartition]]:
        """Group ``keys`` by leader; those without a live leader go to ``problems``."""
        groups: dict[_Leader, list[TopicPartition]] = {}
        brokers: dict[int, _Leader | None] = {}
        for key in sorted(set(keys)):
            state = self._layout.partition_state(*key)
            if state is None or state.leader < 0:
                problems[key] = Watermarks.unknown("no leader")
                continue
            if state.leader not in brokers:
                brokers[state.leader] = self._leader(state.leader)
            leader = brokers[state.leader]
            if leader is None:
                problems[key] = Watermarks.unknown(f"leader {state.leader} is not registered", state.leader)
            else:
                groups.setdefault(leader, []).append(key)
        return groups

    def _leader(self, broker_id: int) -> _Leader | None:
        info = self._layout.broker(broker_id)
        if info is None or info.host is None or info.port <= 0:
            return None
        return _Leader(broker_id, info.host, info.port)

    def _ask(self, leader: _Leader, keys: list[TopicPartition], timestamp: int) -> InFlightRequest:
        topics: dict[str, list[dict[str, int]]] = {}
        for topic, partition in keys:
            topics.setdefault(topic, []).append({"partition_index": partition, "timestamp": timestamp})
        fields = {"replica_id": -1, "isolation_level": 0,
                  "topics": [{"name": t, "partitions": parts} for t, parts in topics.items()]}
        return self._connection(leader).send_async(ListOffsetsRequest, fields)

    @staticmethod
    def _answers(handle: InFlightRequest) -> dict[TopicPartition, Any]:
        response = handle.result()
        return {(t.name, p.partition_index): p for t in response.topics for p in t.partitions}

    def _connection(self, leader: _Leader) -> BrokerConnection:
        address = (leader.host, leader.port)
        conn = self._connections.get(address)
        if conn is None:
            conn = BrokerConnection(leader.host, leader.port, client_id=self._client_id,
                                    request_timeout_ms=self._request_timeout_ms,
                                    connect_timeout_ms=self._request_timeout_ms)
            self._connections[address] = conn
        conn.connect()
        return conn

    def _drop(self, leader: _Leader) -> None:
        conn = self._connections.pop((leader.host, leader.port), None)
        if conn is not None:
            conn.close()


def _combine(key: TopicPartition, broker_id: int, starts: dict[TopicPartition, Any],
             ends: dict[TopicPartition, Any]) -> Watermarks:
    start, end = starts.get(key), ends.get(key)
    if start is None or end is None:
        return Watermarks.unknown(f"broker {broker_id} did not answer for it", broker_id)
    for part in (start, end):
        if part.error_code:
            return Watermarks.unknown(f"{for_code(part.error_code).message} from broker {broker_id}", broker_id)
    return Watermarks(start.offset, end.offset, broker_id)


def _offset_or_raise(key: TopicPartition, broker_id: int, answers: dict[TopicPartition, Any]) -> int:
    part = answers.get(key)
    if part is None:
        raise MetaqError(f"{key[0]}-{key[1]}: broker {broker_id} did not answer for it")
    if part.error_code:
        raise MetaqError(f"{key[0]}-{key[1]}: {for_code(part.error_code).message} from broker {broker_id}")
    return int(part.offset)


def _describe_problems(problems: dict[TopicPartition, Watermarks]) -> str:
    shown = ", ".join(f"{t}-{p} ({w.error})" for (t, p), w in sorted(problems.items())[:5])
    more = f" and {len(problems) - 5} more" if len(problems) > 5 else ""
    return f"cannot reach the leader of {shown}{more}"
