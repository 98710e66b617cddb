"""Reading one planned offset range from its partition's leader, on an executor.

    for columns in read_range(offset_range, settings):     # RecordColumns: offsets, timestamps, keys, values...
        ...

Exactly the offsets ``[start, end)`` are returned, so a retried task returns the same rows. Broker
connections are kept per Python worker (Spark reuses workers across tasks) and the next Fetch is sent
before the current answer is decoded, so the broker's disk read overlaps our decoding. A leader that
refuses is looked up again in ZooKeeper (or by Metadata, with ``bootstrap.servers``); offsets that retention
already deleted follow ``failOnDataLoss``.
"""

from __future__ import annotations

import bisect
import logging
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.consumer import FetchRequest

from metaq.client.cluster import EARLIEST, LATEST, ClusterClient, list_offsets_answers, send_list_offsets
from metaq.client.connection import BrokerConnection
from metaq.client.in_flight import InFlightRequest
from metaq.client.metadata import MetadataLayout
from metaq.client.security import SecurityConfig
from metaq.client.settings import ConnectionSettings
from metaq.client.versions import DEFAULT_FALLBACK
from metaq.errors import (
    BrokerConnectionError,
    DataLossError,
    MetaqError,
    OffsetOutOfRangeError,
    ZooKeeperError,
    for_code,
)
from metaq.protocol.control import aborted_ranges
from metaq.protocol.messages import ApiStruct, RequestFields
from metaq.protocol.records import RecordColumns, decode_columns
from metaq.retry import spark_fetch
from metaq.spark.planning import OffsetRange
from metaq.zkclient import session
from metaq.zksecurity import ZooKeeperSecurity
from zk_layout import ZkLayout

log = logging.getLogger(__name__)

_POLICY = spark_fetch()  # through a leader failover: the dead leader's ZooKeeper session must expire first
_HW_LAG_ATTEMPTS = 6
"""Empty answers at or above the high watermark but below the planned end retried before they count as
data loss (~3 s): a newly elected leader's high watermark stays where it was until every ISR member fetched
from it (metaq/broker/replication/partition_state.py), so it can lag the old leader's, which planned the end."""
_MAX_WAIT_MS = 500  # planned offsets are below the high watermark, so the broker answers at once anyway
_BATCH_HEAD = struct.Struct(">qi")  # base offset, batch length
_LAST_DELTA = struct.Struct(">i")
_LAST_DELTA_POS = 23
_LOG_OVERHEAD = 12
_MIN_HEADER = 61


_connections: dict[tuple[str, int, SecurityConfig], BrokerConnection] = {}
"""Per Python worker: a worker runs one task at a time and is reused for the next one (by queries with
other security options too, hence the key)."""


@dataclass(frozen=True)
class FetchSettings:
    zookeeper_connect: str | None = None
    client_id: str = "metaq-spark"
    fetch_max_bytes: int = 4 * 1024 * 1024
    request_timeout_ms: int = 30000
    fail_on_data_loss: bool = True
    zk_session_timeout_ms: int = 10000
    zk_connection_timeout_ms: int = 10000
    zk_security: ZooKeeperSecurity | None = None
    security: SecurityConfig = field(default_factory=SecurityConfig)
    broker_version_fallback: str = DEFAULT_FALLBACK
    isolation_level: int = 0
    """1 (read_committed): Fetch up to the last stable offset and leave out aborted transactions."""
    bootstrap_servers: str | None = None
    """Instead of ``zookeeper_connect``: leaders are asked of these brokers by Metadata."""

    def connection_settings(self, **limits: Any) -> ConnectionSettings:
        return ConnectionSettings(client_id=self.client_id, request_timeout_ms=self.request_timeout_ms,
                                  security=self.security, broker_version_fallback=self.broker_version_fallback,
                                  **limits)


def read_range(offset_range: OffsetRange, settings: FetchSettings, *,
               headers: bool = True) -> Iterator[RecordColumns]:
    """The records of ``offset_range``, in offset order, in chunks of one Fetch each, column by column
    (decoded straight into columns: see :class:`RecordColumns`); their headers only if asked for."""
    return _RangeReader(offset_range, settings, headers).records()


class _RangeReader:
    def __init__(self, offset_range: OffsetRange, settings: FetchSettings, headers: bool) -> None:
        self.range = offset_range
        self.settings = settings
        self.headers = headers
        self.max_bytes = settings.fetch_max_bytes
        self.address: tuple[str, int] | None = (
            (offset_range.leader_host, offset_range.leader_port) if offset_range.leader_host else None)
        self.failures = 0
        self.failing_since = 0.0
        self.hw_waits = 0

    def records(self) -> Iterator[RecordColumns]:
        r = self.range
        pos = r.start
        pending: tuple[int, InFlightRequest] | None = None
        while pos < r.end:
            part, pending = self._answer(pos, pending)
            if part is None:
                continue
            if part.error_code:
                pos = self._on_error(pos, part)
                continue
            data = part.records or b""
            hint = _next_offset_hint(data)
            if hint is not None and hint < r.end:
                pending = self._send_next(hint)
            result = decode_columns(data, pos, with_headers=self.headers)
            if result.next_offset is None:
                pos = self._on_empty(pos, part, result.first_batch_size)
                continue
            self.failures = self.hw_waits = 0
            chunk = result.columns
            if self.settings.isolation_level and chunk:
                _drop_aborted(chunk, aborted_ranges(data, getattr(part, "aborted_transactions", None) or ()))
            if chunk and chunk.offsets[-1] >= r.end:
                chunk.delete(bisect.bisect_left(chunk.offsets, r.end))
            if chunk:
                yield chunk
            pos = result.next_offset
        if pending is not None:
            _discard(pending[1])

    # -- requests -------------------------------------------------------------------------------------------

    def _answer(self, pos: int, pending: tuple[int, InFlightRequest] | None) -> tuple[ApiStruct | None, None]:
        """The partition's part of the Fetch answer for ``pos`` (the pipelined one if it asked for ``pos``),
        or None after a connection failure (then the leader is looked up again)."""
        try:
            if pending is not None and pending[0] == pos:
                handle = pending[1]
            else:
                if pending is not None:
                    _discard(pending[1])
                handle = self._connection().send_async(FetchRequest, self._fields(pos))
            response = handle.result()
        except (BrokerConnectionError, ZooKeeperError, _NoLeader) as e:
            self._retry(f"cannot fetch from {self._where()}: {e}")
            return None, None
        assert response is not None  # a Fetch always has a response
        for topic in response.responses:
            for part in topic.partitions:
                if topic.topic == self.range.topic and part.partition_index == self.range.partition:
                    return part, None
        raise MetaqError(f"metaq: the Fetch answer from {self._where()} lacks {self.range.describe()}")

    def _send_next(self, pos: int) -> tuple[int, InFlightRequest] | None:
        try:
            return pos, self._connection().send_async(FetchRequest, self._fields(pos))
        except BrokerConnectionError:
            return None  # the next _answer() sends again and handles the failure

    def _fields(self, pos: int) -> RequestFields:
        r = self.range
        return {"replica_id": -1, "max_wait_ms": _MAX_WAIT_MS, "min_bytes": 1, "max_bytes": self.max_bytes,
                "isolation_level": self.settings.isolation_level,
                "topics": [{"topic": r.topic, "partitions": [
                    {"partition": r.partition, "fetch_offset": pos, "partition_max_bytes": self.max_bytes}]}]}

    def _connection(self) -> BrokerConnection:
        if self.address is None:
            self.address = self._find_leader()
        key = (*self.address, self.settings.security)
        conn = _connections.get(key)
        if conn is None:
            settings = self.settings.connection_settings(max_response_bytes=max(104857600, 2 * self.max_bytes))
            conn = settings.new_connection(*self.address)
            _connections[key] = conn
        conn.connect()
        return conn

    def _find_leader(self) -> tuple[str, int]:
        """Ask ZooKeeper (or, with ``bootstrap.servers``, the brokers) who leads the partition now (rare: only
        after the planned leader refused)."""
        r, s = self.range, self.settings
        if s.bootstrap_servers:
            layout = MetadataLayout(s.bootstrap_servers, s.connection_settings(), option="option 'bootstrap.servers':")
            leader = ClusterClient(layout, s.connection_settings()).leader(r.topic, r.partition, fresh=True)
            where = f"the Metadata of {s.bootstrap_servers}"
        else:
            assert s.zookeeper_connect is not None
            with session(s.zookeeper_connect, session_timeout_ms=s.zk_session_timeout_ms,
                         connection_timeout_ms=s.zk_connection_timeout_ms, security=s.zk_security) as client:
                leader = ClusterClient(ZkLayout(client), s.connection_settings()).leader(r.topic, r.partition,
                                                                                         fresh=True)
            where = "ZooKeeper"
        if leader is None:
            raise _NoLeader(f"{r.topic}-{r.partition} has no live leader in {where}")
        return leader.host, leader.port

    def _where(self) -> str:
        return f"{self.address[0]}:{self.address[1]}" if self.address else "the leader"

    # -- what an answer can say ---------------------------------------------------------------------------------

    def _on_error(self, pos: int, part: ApiStruct) -> int:
        error = for_code(part.error_code)
        if error is OffsetOutOfRangeError:
            return self._out_of_range(pos, part.log_start_offset, part.high_watermark)
        if error.retriable or error.invalid_metadata:
            self._retry(f"{error.message} from {self._where()} for {self.range.describe()}")
            return pos
        raise error(f"{error.message} ({error.code}) from {self._where()} reading {self.range.describe()} at {pos}")

    def _out_of_range(self, pos: int, log_start: int, log_end: int) -> int:
        """Where to go on when ``pos`` is no longer (or not yet) in the log."""
        r = self.range
        if log_start < 0 or log_end < 0:
            log_start, log_end = self._log_bounds(log_start, log_end)
        if pos < log_start:
            if not r.from_earliest:
                self._data_lost(pos, min(log_start, r.end), "retention deleted them")
            return min(log_start, r.end)
        self._data_lost(pos, r.end, f"the log ends at {log_end} (truncated or recreated)")
        return r.end

    def _log_bounds(self, log_start: int, log_end: int) -> tuple[int, int]:
        """The log's start and end from the leader (ListOffsets): Kafka's brokers answer OFFSET_OUT_OF_RANGE
        with -1 for both (docs/testing-apache-kafka.md, "What the rows found"); the metaq broker fills them
        in. On a failure the unknown values stay, and the caller reports the range as lost without a cause."""
        key = (self.range.topic, self.range.partition)
        try:
            conn = self._connection()
            answers = [list_offsets_answers(send_list_offsets(conn, [key], which).result()).get(key)
                       for which in (EARLIEST, LATEST)]
        except MetaqError as e:
            log.info("metaq: cannot list the offsets of %s after OFFSET_OUT_OF_RANGE: %s", self.range.describe(), e)
            return log_start, log_end
        found = [a.offset if a is not None and not a.error_code else -1 for a in answers]
        return found[0], found[1]

    def _on_empty(self, pos: int, part: ApiStruct, first_batch_size: int | None) -> int:
        """No complete batch in the answer: a batch larger than the fetch size, or nothing there."""
        if first_batch_size is not None and first_batch_size > self.max_bytes:
            log.info("metaq: a batch of %d bytes at %s offset %d; fetching with that size",
                     first_batch_size, self.range.describe(), pos)
            self.max_bytes = first_batch_size
            return pos
        if pos >= part.high_watermark:
            self.hw_waits += 1
            if pos < self.range.end and self.hw_waits < _HW_LAG_ATTEMPTS:
                self._retry(f"the high watermark {part.high_watermark} is below the planned end "
                            f"{self.range.end} (a new leader?)")
                return pos
            return self._out_of_range(pos, part.log_start_offset, part.high_watermark)
        self._retry(f"an empty answer below the high watermark {part.high_watermark} at offset {pos}")
        return pos

    def _data_lost(self, first: int, end: int, why: str) -> None:
        r = self.range
        message = f"offsets [{first}, {end}) of {r.topic}-{r.partition} cannot be read: {why}"
        if self.settings.fail_on_data_loss:
            raise DataLossError(f"metaq: {message}. Set option failOnDataLoss=false to skip them")
        log.warning("metaq: %s; skipping them (failOnDataLoss=false)", message)

    def _retry(self, reason: str) -> None:
        """Back off, forget the leader (it is looked up again); give up once a failover had its time."""
        if self.failures == 0:
            self.failing_since = time.monotonic()
        self.failures += 1
        if self.address is not None:
            conn = _connections.pop((*self.address, self.settings.security), None)
            if conn is not None:
                conn.close()
        self.address = None
        if _POLICY.exhausted(self.failures, time.monotonic() - self.failing_since):
            raise MetaqError(f"metaq: giving up on {self.range.describe()} after {self.failures} attempts in "
                             f"{time.monotonic() - self.failing_since:.0f} s: {reason}")
        log.info("metaq: %s; retrying (attempt %d)", reason, self.failures)
        time.sleep(_POLICY.delay(self.failures))


class _NoLeader(MetaqError):
    """ZooKeeper (or Metadata) names no live leader right now; counted as a failed attempt."""


def _drop_aborted(chunk: RecordColumns, ranges: list[tuple[int, int]]) -> None:
    """Remove the records of aborted transactions (read_committed: docs/transactions.md §4) from ``chunk``,
    whose offsets ascend: each range is one slice of it."""
    for first, last in reversed(ranges):
        chunk.delete(bisect.bisect_left(chunk.offsets, first), bisect.bisect_right(chunk.offsets, last))


def _next_offset_hint(data: bytes) -> int | None:
    """The offset after the last complete batch, read from batch headers only (no decoding), so that the
    next Fetch can be on the wire while this answer is decoded. None if there is no complete batch."""
    pos, end, hint = 0, len(data), None
    while end - pos >= _MIN_HEADER:
        base, length = _BATCH_HEAD.unpack_from(data, pos)
        size = length + _LOG_OVERHEAD
        if length <= 0 or pos + size > end:
            break
        hint = base + _LAST_DELTA.unpack_from(data, pos + _LAST_DELTA_POS)[0] + 1
        pos += size
    return hint


def _discard(handle: InFlightRequest) -> None:
    """Wait out a pipelined request nobody needs, so the connection stays in step."""
    try:
        handle.result()
    except MetaqError:
        pass


def close_connections() -> None:
    """Close this worker's broker connections (tests, and workers that are being retired)."""
    for conn in _connections.values():
        conn.close()
    _connections.clear()
