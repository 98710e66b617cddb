"""A tiny Kafka-wire server for client tests: real sockets, kafka-python-encoded responses.

    with FakeBroker() as broker:                     # serves ApiVersions, Metadata and Produce
        conn = BrokerConnection("127.0.0.1", broker.port)

A test replaces ``broker.handlers[api_key]`` with a function ``(request: Received) -> reply``; a reply is a
response object (framed with the request's correlation id), None (no response), raw ``bytes`` written as they
are, or :data:`CLOSE` to drop the connection.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)
from kafka.record.memory_records import MemoryRecords

CLOSE = object()
SUPPORTED = {0: (3, 7), 1: (4, 11), 2: (0, 2), 3: (0, 4), 18: (0, 3), 22: (0, 1)}
REQUESTS: dict[int, type[ApiMessage]] = {0: ProduceRequest, 1: FetchRequest, 3: MetadataRequest,
                                         18: ApiVersionsRequest, 22: InitProducerIdRequest}


@dataclass
class Received:
    api_key: int
    version: int
    correlation_id: int
    request: Any  # the decoded request (None if it did not decode)


@dataclass
class StoredRecord:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


Handler = Callable[[Received], Any]


class FakeBroker:
    def __init__(self, *, node_id: int = 0, supported: dict[int, tuple[int, int]] | None = None) -> None:
        self.node_id = node_id
        self.supported = dict(SUPPORTED if supported is None else supported)
        self.topics: dict[str, int] = {"t1": 3}
        self.log: dict[tuple[str, int], list[StoredRecord]] = {}
        self.received: list[Received] = []
        self.produce_errors: dict[tuple[str, int], list[int]] = {}  # error codes to answer, one per request
        self.handlers: dict[int, Handler] = {18: self.api_versions, 3: self.metadata, 0: self.produce,
                                             22: self.init_producer_id}
        self.producer_ids: list[int] = []  # handed out by InitProducerId
        self.connections = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._clients: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stopped = False
        self._thread = threading.Thread(target=self._accept, name="fake-broker-accept", daemon=True)

    def __enter__(self) -> FakeBroker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stopped = True
        _quietly(self._server.shutdown, socket.SHUT_RDWR)  # wakes the accept() (close alone does not)
        self._server.close()
        if self._thread.is_alive():
            self._thread.join(5)
        with self._lock:
            for client in self._clients:
                _quietly(client.shutdown, socket.SHUT_RDWR)
                _quietly(client.close)

    def drop_connections(self) -> None:
        with self._lock:
            for client in self._clients:
                _quietly(client.shutdown, socket.SHUT_RDWR)

    def records(self, topic: str, partition: int) -> list[StoredRecord]:
        with self._lock:
            return list(self.log.get((topic, partition), []))

    # -- serving ---------------------------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                self._clients.append(client)
                self.connections += 1
            threading.Thread(target=self._serve, args=(client,), name="fake-broker-conn", daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            while True:
                frame = _read_frame(client)
                if frame is None:
                    return
                reply = self._dispatch(frame)
                if reply is CLOSE:
                    client.shutdown(socket.SHUT_RDWR)
                    return
                if reply is not None:
                    client.sendall(reply)
        except OSError:
            return
        finally:
            _quietly(client.close)

    def _dispatch(self, frame: bytes) -> Any:
        api_key, version, correlation_id = struct.unpack_from(">hhi", frame, 0)
        try:
            request = REQUESTS[api_key].decode(frame, version=version, header=True)
        except (KeyError, ValueError):
            request = None
        received = Received(api_key, version, correlation_id, request)
        with self._lock:
            self.received.append(received)
        reply = self.handlers[api_key](received)
        if isinstance(reply, ApiMessage):
            reply.with_header(correlation_id=correlation_id)
            return bytes(reply.encode(header=True, framed=True))
        return reply

    # -- default handlers ------------------------------------------------------------------------------------

    def api_versions(self, r: Received) -> Any:
        R = ApiVersionsResponse
        keys = [R.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in self.supported.items()]
        low, high = self.supported.get(18, (0, 0))
        if r.request is None or not low <= r.version <= high:
            return R[0](error_code=35, api_keys=keys)
        return R[r.version](error_code=0, api_keys=keys, throttle_time_ms=0)

    def metadata(self, r: Received) -> Any:
        R = MetadataResponse
        names = [t.name for t in r.request.topics] if r.request.topics is not None else list(self.topics)
        topics = []
        for name in names:
            count = self.topics.get(name)
            partitions = [R.MetadataResponseTopic.MetadataResponsePartition(
                error_code=0, partition_index=p, leader_id=self.node_id, replica_nodes=[self.node_id],
                isr_nodes=[self.node_id]) for p in range(count or 0)]
            topics.append(R.MetadataResponseTopic(error_code=0 if count else 3, name=name, is_internal=False,
                                                  partitions=partitions))
        return R[r.version](throttle_time_ms=0, brokers=[R.MetadataResponseBroker(
            node_id=self.node_id, host="127.0.0.1", port=self.port, rack=None)], cluster_id="fake",
            controller_id=self.node_id, topics=topics)

    def init_producer_id(self, r: Received) -> Any:
        with self._lock:
            self.producer_ids.append(1000 + len(self.producer_ids))
            producer_id = self.producer_ids[-1]
        return InitProducerIdResponse[r.version](throttle_time_ms=0, error_code=0, producer_id=producer_id,
                                                 producer_epoch=0)

    def produce(self, r: Received) -> Any:
        R = ProduceResponse
        acks = r.request.acks
        topics = []
        for topic in r.request.topic_data:
            parts = []
            for data in topic.partition_data:
                error, base = self._append(topic.name, data.index, data.records)
                parts.append(R.TopicProduceResponse.PartitionProduceResponse(
                    index=data.index, error_code=error, base_offset=base, log_append_time_ms=-1,
                    log_start_offset=0))
            topics.append(R.TopicProduceResponse(name=topic.name, partition_responses=parts))
        if acks == 0:
            return None
        return R[r.version](responses=topics, throttle_time_ms=0)

    def _append(self, topic: str, partition: int, records: bytes) -> tuple[int, int]:
        with self._lock:
            errors = self.produce_errors.get((topic, partition))
            if errors:
                return errors.pop(0), -1
            stored = self.log.setdefault((topic, partition), [])
            base = len(stored)
            for batch in MemoryRecords(bytes(records)):
                assert batch.validate_crc(), "bad CRC"
                for record in batch:
                    stored.append(StoredRecord(base + record.offset, record.timestamp, record.key, record.value,
                                               list(record.headers)))
            return 0, base


def _read_frame(sock: socket.socket) -> bytes | None:
    head = _read_exact(sock, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">i", head)
    return _read_exact(sock, size)


def _read_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _quietly(fn: Callable[..., Any], *args: Any) -> None:
    try:
        fn(*args)
    except OSError:
        pass


def response_frame(response: ApiMessage, correlation_id: int) -> bytes:
    """A framed response as the broker would write it."""
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))
