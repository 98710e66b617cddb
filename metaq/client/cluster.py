"""One way to reach a metaq cluster: brokers and partition leaders from ZooKeeper, a connection per broker,
and ListOffsets batched per leader. The consumer, the producer, the ops tools and the Spark source all use it::

    client = ClusterClient.from_zookeeper("127.0.0.1:2181/metaq", ConnectionSettings(client_id="etl"))
    client.topic("clicks")                           # TopicInfo(partitions=(0, 1, 2), available=(0, 1, 2))
    client.leaders([("clicks", 0), ("clicks", 1)])   # {("clicks", 0): Leader("10.0.0.5", 9092, 0), ...}
    client.list_offsets([("clicks", 0)], LATEST)     # {("clicks", 0): ListedOffset(offset=120, broker_id=0)}
    client.close()

Leaders come from the Kafka 0.8 layout the brokers maintain (``/brokers/topics/<t>/partitions/<p>/state`` for
the leader, ``/brokers/ids/<id>`` for its address), read through :class:`zk_layout.ZkLayout`, as
Kafka 0.8's own tools do. A broker's address is its first listener whose security protocol is the client's
``security.protocol`` (:func:`broker_endpoint`). Topics are cached for ``metadata.max.age.ms``
(:meth:`ClusterClient.topic`), and a topic is read again after a request for it failed with
NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION or a lost connection; ``leaders(keys, fresh=True)`` reads
just those partitions' state nodes now, pipelined (the consumer's fetcher manager and leader finder, which
retry until a leader appears).

Connections: the client keeps one connection per broker for its own requests (ListOffsets, :meth:`request`),
opened on first use and serialised by a lock, so the client may be shared between threads. A caller with its
own I/O model (the consumer's fetch threads, the producer's sender) gets a dedicated connection from
:meth:`ClusterClient.open_connection`; every connection is made by :class:`ConnectionSettings`, the one place
for security options.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, Protocol

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import ListOffsetsRequest

from metaq.client.connection import BrokerConnection
from metaq.client.in_flight import InFlightRequest
from metaq.client.settings import ConnectionSettings
from metaq.errors import BrokerConnectionError, MetaqError, ProtocolError, UnknownTopicError, for_code
from metaq.protocol.messages import ApiResponse, ApiStruct, RequestFields
from zk_layout import BrokerInfo, PartitionState, TopicAssignment, parse_endpoint

if TYPE_CHECKING:
    from kazoo.client import KazooClient

log = logging.getLogger(__name__)

__all__ = ["EARLIEST", "LATEST", "ClusterClient", "Leader", "ListedOffset", "NoLeader", "TopicInfo",
           "TopicPartition", "broker_endpoint", "list_offsets_answers", "send_list_offsets"]

TopicPartition = tuple[str, int]

LATEST = -1  # ListOffsets' special timestamps
EARLIEST = -2

_RETRY_FAILED_READ = 1.0  # seconds before re-reading ZooKeeper after a failed read of a known topic


class Leader(NamedTuple):
    """Where a partition is read and written: its leader broker's address (for the client's security protocol)
    and id."""

    host: str
    port: int
    broker_id: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class NoLeader:
    """Why a partition has no reachable leader now: ``"no leader"`` or ``"leader 3 is not registered"``."""

    reason: str
    broker_id: int | None = None


@dataclass(frozen=True)
class TopicInfo:
    """One topic as read at ``read_at`` (time.monotonic())."""

    name: str
    partitions: tuple[int, ...]  # sorted
    available: tuple[int, ...]  # partitions with a registered leader
    leaders: dict[int, Leader] = field(repr=False)
    read_at: float
    missing: dict[int, NoLeader] = field(default_factory=dict, repr=False)  # why the others have none
    # the partitions again, for membership tests: ``in`` on the tuple scans it (6.7 us for 999 of 1,000),
    # once per producer send() with an explicit partition
    partition_set: frozenset[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "partition_set", frozenset(self.partitions))

    def leader(self, partition: int) -> Leader | NoLeader:
        found = self.leaders.get(partition)
        if found is not None:
            return found
        if partition not in self.partition_set:
            return NoLeader(f"topic {self.name} has no partition {partition}")
        return self.missing.get(partition, NoLeader("no leader"))


@dataclass(frozen=True, slots=True)
class ListedOffset:
    """One partition's answer to ListOffsets: the offset, or why there is none (``error``; the broker's
    ``error_code`` when it answered with one; ``no_leader`` when no broker was asked)."""

    offset: int | None
    broker_id: int | None
    error: str | None = None
    error_code: int = 0
    no_leader: bool = False


class Layout(Protocol):
    """The part of ``zk_layout.ZkLayout`` the client reads (tests substitute an in-memory one; a test of
    topic metadata alone may leave out the last two)."""

    def topic_assignment(self, topic: str) -> TopicAssignment | None: ...

    def partition_state(self, topic: str, partition: int) -> PartitionState | None: ...

    def brokers(self) -> dict[int, BrokerInfo]: ...

    def broker(self, broker_id: int) -> BrokerInfo | None: ...

    def partition_states(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, PartitionState | None]: ...


# -- ListOffsets, the one request builder and answer reader ------------------------------------------


def send_list_offsets(conn: BrokerConnection, keys: Iterable[TopicPartition], timestamp: int,
                      isolation_level: int = 0) -> InFlightRequest:
    """Write one ListOffsets for ``keys`` at ``timestamp`` (EARLIEST, LATEST or a time in ms) to ``conn``;
    with ``isolation_level`` 1 (read_committed) LATEST is the last stable offset."""
    topics: dict[str, list[dict[str, int]]] = {}
    for topic, partition in keys:
        # max_num_offsets: ListOffsets v0 (Kafka 0.8's OffsetRequest) answers a list; one is enough
        topics.setdefault(topic, []).append({"partition_index": partition, "timestamp": timestamp,
                                             "max_num_offsets": 1})
    fields = {"replica_id": -1, "isolation_level": isolation_level,
              "topics": [{"name": t, "partitions": parts} for t, parts in topics.items()]}
    return conn.send_async(ListOffsetsRequest, fields)


def list_offsets_answers(response: ApiResponse | None) -> dict[TopicPartition, ApiStruct]:
    """A ListOffsets response's partitions by key (each with ``error_code`` and ``offset``; a v0 answer's
    list of offsets, newest first, gives its first as ``offset``)."""
    if response is None:
        raise ProtocolError("ListOffsets got no response")  # it always expects one: a bug if reached
    answers: dict[TopicPartition, ApiStruct] = {}
    for t in response.topics:
        for p in t.partitions:
            if p.offset == -1 and p.old_style_offsets:  # v0
                p.offset = p.old_style_offsets[0]
            answers[(t.name, p.partition_index)] = p
    return answers


def broker_endpoint(info: BrokerInfo | None, security_protocol: str = "PLAINTEXT") -> tuple[str, int] | None:
    """(host, port) of a broker registration's first listener speaking ``security_protocol`` (listener
    names map to protocols through ``listener_security_protocol_map``, as in Kafka), or None without one.
    PLAINTEXT falls back to the 0.8 ``host``/``port`` fields, which is all older registrations have."""
    if info is None:
        return None
    protocols = getattr(info, "security_protocol_map", None) or {}
    for endpoint in getattr(info, "endpoints", ()):
        parsed = parse_endpoint(endpoint)
        if parsed is not None and protocols.get(parsed.listener, parsed.listener) == security_protocol \
                and parsed.port > 0:
            return parsed.host, parsed.port
    if security_protocol == "PLAINTEXT" and info.host and info.port > 0:
        return str(info.host), int(info.port)
    return None


class ClusterClient:
    """Leaders, topic metadata, broker connections and ListOffsets; see the module docstring. Thread-safe.

    ``assume_preferred_leader``: a partition without a state node yet (a topic created by hand) is taken to
    be led by its first live replica; a wrong guess is answered NOT_LEADER_OR_FOLLOWER and re-read.
    """

    def __init__(self, layout: Layout, settings: ConnectionSettings | None = None, *,
                 metadata_max_age_ms: int = 300000, assume_preferred_leader: bool = False,
                 on_close: Callable[[], None] | None = None) -> None:
        self.layout = layout
        self.settings = settings if settings is not None else ConnectionSettings()
        self._max_age = metadata_max_age_ms / 1000.0
        self._assume_preferred = assume_preferred_leader
        self._on_close = on_close
        self._topics: dict[str, TopicInfo] = {}
        self.known_topics: Mapping[str, TopicInfo] = types.MappingProxyType(self._topics)
        """The topics as last read, even if older than metadata.max.age.ms or invalidated: for a hot path
        whose staleness something else bounds by calling :meth:`topic` (the producer's sender, per batch)."""
        self._read_lock = threading.Lock()  # serialises topic reads so that concurrent misses do one read
        self._conn_lock = threading.Lock()  # guards _connections
        self._io_lock = threading.RLock()  # one request at a time on the shared connections
        self._connections: dict[int, BrokerConnection] = {}

    @classmethod
    def from_zookeeper(cls, connect: str, settings: ConnectionSettings | None = None, *,
                       session_timeout_ms: int = 6000, connection_timeout_ms: int = 6000,
                       metadata_max_age_ms: int = 300000, assume_preferred_leader: bool = False) -> ClusterClient:
        """A client over its own ZooKeeper session (closed by :meth:`close`)."""
        from metaq import zkclient  # imported late: tests that inject a layout need no ZooKeeper code
        from zk_layout import ZkLayout

        zk = zkclient.connect(connect, session_timeout_ms=session_timeout_ms,
                              connection_timeout_ms=connection_timeout_ms)
        return cls(ZkLayout(zk), settings, on_close=lambda: _stop_kazoo(zk),
                   metadata_max_age_ms=metadata_max_age_ms, assume_preferred_leader=assume_preferred_leader)

    def __enter__(self) -> ClusterClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- leaders -------------------------------------------------------------------------------------

    def leaders(self, keys: Iterable[TopicPartition], *,
                fresh: bool = False) -> dict[TopicPartition, Leader | NoLeader]:
        """Each partition's leader, from the topic cache, or (``fresh``) as ZooKeeper names it now: then the
        state nodes are read with pipelined requests and each leader's registration once. Raises the
        ZooKeeper errors of ZkLayout."""
        wanted = sorted(set(keys))
        if not fresh:
            return self._cached_leaders(wanted)
        states = self.layout.partition_states(wanted)
        brokers: dict[int, Leader | NoLeader] = {}
        result: dict[TopicPartition, Leader | NoLeader] = {}
        for key, state in states.items():
            if state is None or state.leader < 0:
                result[key] = NoLeader("no leader")
                continue
            if state.leader not in brokers:
                brokers[state.leader] = self._broker(state.leader, self.layout.broker(state.leader))
            result[key] = brokers[state.leader]
        return result

    def leader(self, topic: str, partition: int, *, fresh: bool = False) -> Leader | None:
        """The partition's leader (see :meth:`leaders`), or None if it has no live one."""
        found = self.leaders([(topic, partition)], fresh=fresh)[(topic, partition)]
        return found if isinstance(found, Leader) else None

    def _cached_leaders(self, keys: list[TopicPartition]) -> dict[TopicPartition, Leader | NoLeader]:
        infos: dict[str, TopicInfo | None] = {}
        result: dict[TopicPartition, Leader | NoLeader] = {}
        for topic, partition in keys:
            if topic not in infos:
                try:
                    infos[topic] = self.topic(topic)
                except UnknownTopicError:
                    infos[topic] = None
            info = infos[topic]
            result[(topic, partition)] = NoLeader("no leader") if info is None else info.leader(partition)
        return result

    def _broker(self, broker_id: int, info: BrokerInfo | None) -> Leader | NoLeader:
        protocol = self.settings.security_protocol
        address = broker_endpoint(info, protocol)
        if address is None:
            if info is not None:
                return NoLeader(f"leader {broker_id} has no {protocol} listener", broker_id)
            return NoLeader(f"leader {broker_id} is not registered", broker_id)
        return Leader(address[0], address[1], int(broker_id))

    # -- topic metadata, cached ----------------------------------------------------------------------

    def topic(self, topic: str) -> TopicInfo:
        """The cached topic, re-read when missing or older than metadata.max.age.ms; raises UnknownTopicError."""
        info = self._topics.get(topic)
        if info is None or time.monotonic() - info.read_at > self._max_age:
            with self._read_lock:
                info = self._topics.get(topic)
                if info is None or time.monotonic() - info.read_at > self._max_age:
                    info = self._read_or_keep(topic, info)
        if info is None:
            raise UnknownTopicError(f"topic {topic!r} does not exist in ZooKeeper")
        return info

    def refresh(self, topic: str) -> TopicInfo | None:
        """Read ``topic`` from ZooKeeper now; None (and forgotten) if it does not exist."""
        with self._read_lock:
            return self._read(topic)

    def partitions_for(self, topic: str) -> list[int]:
        return list(self.topic(topic).partitions)

    def leader_for(self, topic: str, partition: int) -> Leader | None:
        """The partition's leader as last read, or None if it has none (or the topic is gone)."""
        try:
            return self.topic(topic).leaders.get(partition)
        except UnknownTopicError:
            return None

    def invalidate(self, topic: str | None = None) -> None:
        """Make the next lookup of ``topic`` (None: of every topic) read ZooKeeper again."""
        for name in [topic] if topic is not None else list(self._topics):
            info = self._topics.get(name)
            if info is not None:
                self._topics[name] = dataclasses.replace(info, read_at=-float("inf"))

    def _read_or_keep(self, topic: str, cached: TopicInfo | None) -> TopicInfo | None:
        """Re-read ``topic``; if ZooKeeper fails and we know the topic, keep using what we know for a while."""
        try:
            return self._read(topic)
        except MetaqError as e:
            if cached is None:
                raise
            log.warning("cannot re-read topic %s from ZooKeeper, using older metadata: %s", topic, e)
            retry_in = min(_RETRY_FAILED_READ, self._max_age)
            kept = dataclasses.replace(cached, read_at=time.monotonic() - self._max_age + retry_in)
            self._topics[topic] = kept
            return kept

    def _read(self, topic: str) -> TopicInfo | None:
        assignment = self.layout.topic_assignment(topic)
        if assignment is None:
            self._topics.pop(topic, None)
            return None
        brokers = self.layout.brokers()
        leaders: dict[int, Leader] = {}
        missing: dict[int, NoLeader] = {}
        for partition, replicas in assignment.partitions.items():
            found = self._topic_leader(topic, partition, replicas, brokers)
            if isinstance(found, Leader):
                leaders[partition] = found
            else:
                missing[partition] = found
        partitions = tuple(sorted(assignment.partitions))
        info = TopicInfo(topic, partitions, tuple(p for p in partitions if p in leaders), leaders,
                         time.monotonic(), missing)
        self._topics[topic] = info
        log.debug("read topic %s from ZooKeeper: %d partitions, %d with a leader", topic, len(partitions),
                  len(leaders))
        return info

    def _topic_leader(self, topic: str, partition: int, replicas: tuple[int, ...],
                      brokers: dict[int, BrokerInfo]) -> Leader | NoLeader:
        state = self.layout.partition_state(topic, partition)
        if state is not None:
            broker_id = state.leader
        elif self._assume_preferred:
            broker_id = next((r for r in replicas if r in brokers), -1)
        else:
            broker_id = -1
        if broker_id < 0:
            return NoLeader("no leader")
        return self._broker(broker_id, brokers.get(broker_id))

    # -- connections ---------------------------------------------------------------------------------

    def open_connection(self, leader: Leader, *, client_id: str | None = None, request_timeout_ms: int | None = None,
                        connect_timeout_ms: int | None = None) -> BrokerConnection:
        """A new, unconnected connection of the caller's own to ``leader`` (the limits given replace the
        settings', as :meth:`ConnectionSettings.with_limits`); the caller connects and closes it."""
        settings = self.settings.with_limits(client_id=client_id, request_timeout_ms=request_timeout_ms,
                                             connect_timeout_ms=connect_timeout_ms)
        return settings.new_connection(leader.host, leader.port)

    def request(self, leader: Leader, request_class: type[ApiMessage], fields: RequestFields) -> ApiResponse:
        """One request on the shared connection to ``leader``; a failed connection is dropped (and the next
        request reconnects). Raises BrokerConnectionError or ProtocolError."""
        with self._io_lock:
            try:
                return self._connection(leader).send(request_class, fields)
            except (BrokerConnectionError, ProtocolError):
                self._drop_connection(leader.broker_id)
                raise

    def _connection(self, leader: Leader) -> BrokerConnection:
        with self._conn_lock:
            conn = self._connections.get(leader.broker_id)
            if conn is not None and (conn.host, conn.port) != (leader.host, leader.port):
                conn.close()  # the broker re-registered at another address
                conn = None
            if conn is None:
                conn = self._connections[leader.broker_id] = self.settings.new_connection(leader.host, leader.port)
        conn.connect()  # a no-op when connected
        return conn

    def _drop_connection(self, broker_id: int) -> None:
        with self._conn_lock:
            conn = self._connections.pop(broker_id, None)
        if conn is not None:
            conn.close()

    # -- ListOffsets ---------------------------------------------------------------------------------

    def list_offsets(self, keys: Iterable[TopicPartition], timestamp: int, *,
                     leaders: Mapping[TopicPartition, Leader | NoLeader | None] | None = None,
                     isolation_level: int = 0) -> dict[TopicPartition, ListedOffset]:
        """Each partition's offset at ``timestamp`` (EARLIEST, LATEST, or the first offset at or after a time
        in ms; -1 when there is none), asked of its leader: one request per leader. Never raises for a
        partition: a failure is its ``error``. ``leaders``: use these instead of :meth:`leaders`.
        ``isolation_level`` 1 (read_committed): LATEST is the last stable offset (docs/transactions.md)."""
        return self.list_offsets_at(keys, [timestamp], leaders=leaders, isolation_level=isolation_level)[0]

    def list_offsets_at(self, keys: Iterable[TopicPartition], timestamps: Sequence[int], *,
                        leaders: Mapping[TopicPartition, Leader | NoLeader | None] | None = None,
                        isolation_level: int = 0) -> list[dict[TopicPartition, ListedOffset]]:
        """:meth:`list_offsets` at several timestamps: the requests to a leader are pipelined."""
        wanted = sorted(set(keys))
        found = leaders if leaders is not None else self.leaders(wanted)
        results: list[dict[TopicPartition, ListedOffset]] = [{} for _ in timestamps]
        groups: dict[Leader, list[TopicPartition]] = {}
        for key in wanted:
            leader = found.get(key) or NoLeader("no leader")
            if isinstance(leader, Leader):
                groups.setdefault(leader, []).append(key)
            else:
                for result in results:
                    result[key] = ListedOffset(None, leader.broker_id, leader.reason, no_leader=True)
        with self._io_lock:
            for leader, group in groups.items():
                self._ask(leader, group, timestamps, results, isolation_level)
        return results

    def _ask(self, leader: Leader, keys: list[TopicPartition], timestamps: Sequence[int],
             results: list[dict[TopicPartition, ListedOffset]], isolation_level: int) -> None:
        broker = leader.broker_id
        try:
            conn = self._connection(leader)
            handles = [send_list_offsets(conn, keys, ts, isolation_level) for ts in timestamps]
            answers = [list_offsets_answers(handle.result()) for handle in handles]
        except (BrokerConnectionError, ProtocolError) as e:
            self._drop_connection(broker)
            self._invalidate_topics(keys)
            for result in results:
                result.update({key: ListedOffset(None, broker, f"broker {broker}: {e}") for key in keys})
            return
        for result, answer in zip(results, answers, strict=True):
            for key in keys:
                part = answer.get(key)
                if part is None:
                    result[key] = ListedOffset(None, broker, f"broker {broker} did not answer for it")
                elif part.error_code:
                    error = for_code(part.error_code)
                    if error.invalid_metadata:
                        self.invalidate(key[0])
                    result[key] = ListedOffset(None, broker, f"{error.message} from broker {broker}",
                                               part.error_code)
                else:
                    result[key] = ListedOffset(int(part.offset), broker)

    def _invalidate_topics(self, keys: Iterable[TopicPartition]) -> None:
        for topic in {key[0] for key in keys}:
            self.invalidate(topic)

    # -- closing -------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the shared connections and (if the client opened it) the ZooKeeper session; idempotent."""
        with self._conn_lock:
            connections, self._connections = list(self._connections.values()), {}
        for conn in connections:
            conn.close()
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            on_close()


def _stop_kazoo(client: KazooClient) -> None:
    try:
        client.stop()
        client.close()
    except Exception:  # closing is best effort: the session expires on its own
        log.warning("closing the ZooKeeper client failed", exc_info=True)
