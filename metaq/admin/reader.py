"""Reading one partition from a chosen offset, without a group (nothing is registered or committed).

    reader = PartitionReader(layout, "clicks", 0, EARLIEST)        # or LATEST, or an offset
    for offset, timestamp, key, value, headers in reader.records(idle_timeout_s=5.0):
        ...
    reader.close()

What ``kafka-console-consumer --partition P --offset N`` does, for looking at a partition's data while
debugging. A leader that moves is looked up again in ZooKeeper; an offset outside the log raises
:class:`OffsetOutOfRangeError` with the log's bounds. Control batches (transaction markers) are never
returned; ``isolation_level=READ_COMMITTED`` reads only up to the last stable offset and leaves out aborted
transactions, as Kafka's consumer does (docs/transactions.md §4); LATEST is then the last stable offset.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

from kafka.protocol.consumer import FetchRequest

from metaq.admin.log_offsets import EARLIEST, LATEST, BrokerLogOffsets
from metaq.client.cluster import ClusterClient
from metaq.client.connection import BrokerConnection
from metaq.client.security import SecurityConfig
from metaq.client.settings import ConnectionSettings
from metaq.client.versions import DEFAULT_FALLBACK
from metaq.errors import BrokerConnectionError, MetaqError, OffsetOutOfRangeError, UnknownTopicError, for_code
from metaq.protocol.control import aborted_ranges, in_ranges
from metaq.protocol.messages import ApiStruct
from metaq.protocol.record_types import Record
from metaq.protocol.records import decode_records
from metaq.retry import admin_reader
from zk_layout import ZkLayout, validate_topic

log = logging.getLogger(__name__)


_MAX_WAIT_MS = 500  # long poll: an idle partition costs one request per half second
_POLICY = admin_reader()  # after a broker error, before looking the leader up again
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
ISOLATION_LEVELS = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}
"""Kafka's ``isolation.level`` names and the isolation_level field of Fetch and ListOffsets."""


class PartitionReader:
    """Fetches ``topic``-``partition`` from ``start`` (an offset, EARLIEST or LATEST); see the module docstring."""

    def __init__(self, layout: ZkLayout, topic: str, partition: int, start: int = LATEST, *,
                 max_bytes: int = 1048576, client_id: str = "metaq-console-consumer",
                 security: SecurityConfig | None = None, isolation_level: int = READ_UNCOMMITTED,
                 broker_version_fallback: str = DEFAULT_FALLBACK) -> None:
        validate_topic(topic)
        assignment = layout.topic_assignment(topic)
        if assignment is None:
            raise UnknownTopicError(f"topic {topic!r} does not exist")
        if partition not in assignment.partitions:
            raise UnknownTopicError(f"topic {topic!r} has no partition {partition} "
                                    f"(partitions 0..{len(assignment.partitions) - 1})")
        self._layout = layout
        self.topic = topic
        self.partition = partition
        self._start = start
        self._max_bytes = max_bytes
        self._client_id = client_id
        self._security = security or SecurityConfig()
        self._isolation_level = isolation_level
        self._fallback = broker_version_fallback  # Kafka 0.8/0.9 brokers (docs/legacy-wire.md)
        self._conn: BrokerConnection | None = None
        self.position: int | None = start if start >= 0 else None

    def records(self, *, idle_timeout_s: float | None = None,
                should_stop: Callable[[], bool] = lambda: False) -> Iterator[Record]:
        """Records in offset order until ``should_stop`` or ``idle_timeout_s`` without a new record."""
        position = self.position if self.position is not None else self._resolve_start()
        self.position = position
        failures = 0
        last_record = time.monotonic()
        while not should_stop():
            if idle_timeout_s is not None and time.monotonic() - last_record >= idle_timeout_s:
                return
            try:
                part = self._fetch(position)
            except (BrokerConnectionError, _Retry) as e:
                failures += 1
                if _POLICY.exhausted(failures):
                    raise MetaqError(f"cannot read {self.topic}-{self.partition}: {e}") from e
                log.info("reading %s-%d: %s; retrying", self.topic, self.partition, e)
                self._close_connection()
                time.sleep(_POLICY.delay(failures))
                continue
            failures = 0
            data = part.records or b""
            result = decode_records(data, position)
            if self._isolation_level == READ_COMMITTED and data:
                dropped = aborted_ranges(data, getattr(part, "aborted_transactions", None) or ())
                if dropped:
                    result = result._replace(records=[r for r in result.records if not in_ranges(r[0], dropped)])
            if result.next_offset is None:
                if result.first_batch_size is not None and result.first_batch_size > self._max_bytes:
                    self._max_bytes = result.first_batch_size
                continue
            for record in result.records:
                last_record = time.monotonic()
                self.position = record[0] + 1
                yield record
            position = self.position = max(result.next_offset, self.position)

    def close(self) -> None:
        self._close_connection()

    def __enter__(self) -> PartitionReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -----------------------------------------------------------------------------------

    def _resolve_start(self) -> int:
        log_offsets = BrokerLogOffsets(self._layout, client_id=self._client_id, security=self._security,
                                       isolation_level=self._isolation_level,
                                       broker_version_fallback=self._fallback)
        try:
            marks = log_offsets.watermarks([(self.topic, self.partition)])[(self.topic, self.partition)]
        finally:
            log_offsets.close()
        if not marks.known:
            raise MetaqError(f"cannot read {self.topic}-{self.partition}: {marks.error}")
        assert marks.start is not None and marks.end is not None
        return marks.start if self._start == EARLIEST else marks.end

    def _fetch(self, position: int) -> ApiStruct:
        fields = {"replica_id": -1, "max_wait_ms": _MAX_WAIT_MS, "min_bytes": 1, "max_bytes": self._max_bytes,
                  "isolation_level": self._isolation_level,
                  "topics": [{"topic": self.topic, "partitions": [
                      {"partition": self.partition, "fetch_offset": position,
                       "partition_max_bytes": self._max_bytes}]}]}
        response = self._connection().send(FetchRequest, fields)
        part: ApiStruct | None = next((p for t in response.responses for p in t.partitions
                     if t.topic == self.topic and p.partition_index == self.partition), None)
        if part is None:
            raise _Retry("the broker's answer lacks the partition")
        if part.error_code:
            error = for_code(part.error_code)
            if error is OffsetOutOfRangeError:
                raise OffsetOutOfRangeError(
                    f"offset {position} is outside the log of {self.topic}-{self.partition} "
                    f"(log start {part.log_start_offset}, log end {part.high_watermark})")
            if error.retriable or error.invalid_metadata:
                raise _Retry(error.message)
            raise error(f"{error.message} reading {self.topic}-{self.partition} at {position}")
        return part

    def _connection(self) -> BrokerConnection:
        if self._conn is None:
            settings = ConnectionSettings(client_id=self._client_id,
                                          max_response_bytes=max(104857600, 2 * self._max_bytes),
                                          security=self._security, broker_version_fallback=self._fallback)
            client = ClusterClient(self._layout, settings)
            leader = client.leader(self.topic, self.partition, fresh=True)
            if leader is None:
                raise _Retry("no live leader in ZooKeeper")
            self._conn = client.open_connection(leader)
        self._conn.connect()
        return self._conn

    def _close_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class _Retry(MetaqError):
    """A condition that a new leader look-up may cure."""

    retriable = True
