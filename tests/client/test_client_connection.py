"""BrokerConnection against a real local socket served by FakeBroker."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest

from metaq.client import BrokerConnection
from metaq.client.frame_reader import _FrameReader, _PeerClosed, _WouldBlock
from metaq.errors import BrokerConnectionError, ProtocolError, UnsupportedVersionError
from metaq.protocol.builder import BatchBuilder
from metaq.testing.wait import wait_until
from tests.client.client_fake_broker import CLOSE, FakeBroker, Received, response_frame

pytestmark = pytest.mark.timeout(30)


_opened: list[BrokerConnection] = []


@pytest.fixture
def fake_broker():
    """A FakeBroker (tests/client/client_fake_broker.py), not a broker process."""
    with FakeBroker() as b:
        yield b
    while _opened:  # the client sockets the test opened (idempotent for those it closed itself)
        _opened.pop().close()


def connect(fake_broker: FakeBroker, **kw) -> BrokerConnection:
    conn = BrokerConnection("127.0.0.1", fake_broker.port, **kw)
    _opened.append(conn)
    conn.connect()
    return conn


def metadata_fields(*topics: str) -> dict:
    return {"topics": [{"name": t} for t in topics], "allow_auto_topic_creation": False}


def produce_fields(topic: str, partition: int, records: bytes, acks: int = 1) -> dict:
    return {"transactional_id": None, "acks": acks, "timeout_ms": 1000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]}


def one_batch(*values: bytes) -> bytes:
    builder = BatchBuilder(1 << 20)
    for v in values:
        builder.append(1700000000000, None, v)
    return builder.build()


def test_connect_negotiates_versions(fake_broker):
    conn = connect(fake_broker)
    assert conn.is_connected
    assert fake_broker.received[0].api_key == 18 and fake_broker.received[0].version == 3
    assert conn.broker_versions[0] == (3, 7)
    assert conn.api_version(0) == 7  # Produce: highest common
    assert conn.api_version(3) == 4  # Metadata: metaq speaks 1..4
    assert conn.api_version(1) == 11
    conn.close()
    assert not conn.is_connected


def test_api_versions_falls_back_to_v0():
    with FakeBroker(supported={0: (0, 9), 3: (0, 12), 18: (0, 2)}) as fake_broker:
        conn = connect(fake_broker)
        assert [r.version for r in fake_broker.received] == [3, 0]
        assert conn.api_version(0) == 7
        assert conn.api_version(3) == 4


def test_no_common_version_raises():
    with FakeBroker(supported={0: (8, 9), 18: (0, 3)}) as fake_broker:
        conn = connect(fake_broker)
        with pytest.raises(UnsupportedVersionError, match="Produce|PRODUCE"):
            conn.api_version(0)  # metaq speaks Produce 0..7
        with pytest.raises(UnsupportedVersionError):
            conn.api_version(1)  # Fetch not offered at all


def test_send_metadata_with_nested_dicts(fake_broker):
    fake_broker.topics = {"t1": 3, "t2": 1}
    conn = connect(fake_broker)
    response = conn.send(MetadataRequest, metadata_fields("t2"))
    assert [t.name for t in response.topics] == ["t2"]
    assert response.brokers[0].port == fake_broker.port
    assert fake_broker.received[-1].version == 4


def test_send_prebuilt_request(fake_broker):
    conn = connect(fake_broker)
    response = conn.send(MetadataRequest, MetadataRequest[1](topics=None))
    assert fake_broker.received[-1].version == 1
    assert sorted(t.name for t in response.topics) == ["t1"]


def test_produce_round_trip(fake_broker):
    conn = connect(fake_broker)
    response = conn.send(ProduceRequest, produce_fields("t1", 2, one_batch(b"a", b"b")))
    part = response.responses[0].partition_responses[0]
    assert (part.index, part.error_code, part.base_offset) == (2, 0, 0)
    assert [r.value for r in fake_broker.records("t1", 2)] == [b"a", b"b"]


def test_produce_acks_0_has_no_response(fake_broker):
    conn = connect(fake_broker)
    assert conn.send(ProduceRequest, produce_fields("t1", 0, one_batch(b"x"), acks=0)) is None
    handle = conn.send_async(ProduceRequest, produce_fields("t1", 0, one_batch(b"y"), acks=0))
    assert handle.done() and handle.result() is None
    # the connection stays in step: the next response is matched to the next request
    assert conn.send(MetadataRequest, metadata_fields("t1")).topics[0].name == "t1"
    assert [r.value for r in fake_broker.records("t1", 0)] == [b"x", b"y"]


def test_pipelining_matches_responses_in_order(fake_broker):
    fake_broker.topics = {f"t{i}": 1 for i in range(5)}
    conn = connect(fake_broker)
    handles = [conn.send_async(MetadataRequest, metadata_fields(f"t{i}")) for i in range(5)]
    # all five on the wire before any read
    wait_until(lambda: len(fake_broker.received) >= 6, 5, "five pipelined requests at the broker")
    assert len(fake_broker.received) == 6
    assert conn.in_flight() == 5
    # asking for the last one first reads the earlier responses and keeps them
    assert handles[4].result().topics[0].name == "t4"
    assert all(h.done() for h in handles)
    assert [h.result().topics[0].name for h in handles] == [f"t{i}" for i in range(5)]
    assert conn.in_flight() == 0


def test_correlation_mismatch_is_protocol_error(fake_broker):
    def wrong_id(r: Received):
        return response_frame(MetadataResponse[r.version](brokers=[], topics=[]), r.correlation_id + 1)

    conn = connect(fake_broker)
    fake_broker.handlers[3] = wrong_id
    first = conn.send_async(MetadataRequest, metadata_fields("t1"))
    second = conn.send_async(MetadataRequest, metadata_fields("t1"))
    with pytest.raises(ProtocolError, match="correlation id"):
        first.result()
    assert not conn.is_connected
    with pytest.raises(ProtocolError):  # every in-flight request fails with it
        second.result()


def test_undecodable_response_is_protocol_error_naming_api(fake_broker):
    fake_broker.handlers[3] = lambda r: struct.pack(">ii", 6, r.correlation_id) + b"\xff\xff"
    conn = connect(fake_broker)
    with pytest.raises(ProtocolError, match=r"METADATA v4"):
        conn.send(MetadataRequest, metadata_fields("t1"))
    assert not conn.is_connected


def test_oversized_frame_is_protocol_error(fake_broker):
    fake_broker.handlers[3] = lambda r: struct.pack(">ii", 1 << 30, r.correlation_id)
    conn = connect(fake_broker)
    with pytest.raises(ProtocolError, match="frame size"):
        conn.send(MetadataRequest, metadata_fields("t1"))


def test_peer_close_is_connection_error(fake_broker):
    conn = connect(fake_broker)
    fake_broker.handlers[3] = lambda r: CLOSE
    with pytest.raises(BrokerConnectionError, match=rf"127.0.0.1:{fake_broker.port}.*METADATA v4"):
        conn.send(MetadataRequest, metadata_fields("t1"))
    assert not conn.is_connected
    with pytest.raises(BrokerConnectionError):
        conn.send(MetadataRequest, metadata_fields("t1"))
    conn.connect()  # the caller reconnects
    fake_broker.handlers[3] = fake_broker.metadata
    assert conn.send(MetadataRequest, metadata_fields("t1")).topics[0].name == "t1"
    assert fake_broker.connections == 2


def test_request_timeout_is_connection_error(fake_broker):
    release = threading.Event()
    fake_broker.handlers[3] = lambda r: release.wait(5) and None
    conn = connect(fake_broker, request_timeout_ms=200)
    started = time.monotonic()
    with pytest.raises(BrokerConnectionError, match="within 200 ms"):
        conn.send(MetadataRequest, metadata_fields("t1"))
    assert 0.15 < time.monotonic() - started < 4  # gave up at the request timeout, not the handler's 5 s
    assert not conn.is_connected
    release.set()


def test_result_timeout_keeps_request_in_flight(fake_broker):
    release = threading.Event()

    def slow(r: Received):
        release.wait(5)
        return fake_broker.metadata(r)

    fake_broker.handlers[3] = slow
    conn = connect(fake_broker)
    handle = conn.send_async(MetadataRequest, metadata_fields("t1"))
    with pytest.raises(TimeoutError):
        handle.result(timeout=0.05)
    assert conn.is_connected and not handle.done()
    release.set()
    assert handle.result(timeout=5).topics[0].name == "t1"


def test_connect_refused_is_connection_error():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    with pytest.raises(BrokerConnectionError, match=f"127.0.0.1:{port}"):
        BrokerConnection("127.0.0.1", port, connect_timeout_ms=500).connect()


def test_close_from_another_thread_interrupts_a_read(fake_broker):
    release = threading.Event()
    fake_broker.handlers[3] = lambda r: release.wait(5) and None
    conn = connect(fake_broker)
    threading.Timer(0.1, conn.close).start()
    started = time.monotonic()
    with pytest.raises(BrokerConnectionError, match="closed"):
        conn.send(MetadataRequest, metadata_fields("t1"))
    assert time.monotonic() - started < 4  # interrupted, not held for the handler's 5 s
    release.set()


def test_large_response_arrives_whole(fake_broker):
    values = [bytes([i % 251]) * 1000 for i in range(3000)]  # ~3 MB, far above the read-ahead buffer
    batch = one_batch(*values)

    from kafka.protocol.consumer import FetchRequest, FetchResponse

    def fetch(r: Received):
        R = FetchResponse
        part = R.FetchableTopicResponse.PartitionData(partition_index=0, error_code=0, high_watermark=3000,
                                                      last_stable_offset=3000, log_start_offset=0,
                                                      aborted_transactions=None, records=batch)
        return R[r.version](throttle_time_ms=0, error_code=0, session_id=0,
                            responses=[R.FetchableTopicResponse(topic="t1", partitions=[part])])

    fake_broker.handlers[1] = fetch
    conn = connect(fake_broker)
    fields = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 24, "isolation_level": 0,
              "topics": [{"topic": "t1", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                         "partition_max_bytes": 1 << 24}]}]}
    responses = [conn.send_async(FetchRequest, fields) for _ in range(3)]
    for handle in responses:
        records = handle.result().responses[0].partitions[0].records
        assert bytes(records) == batch


class _Chunks:
    """recv_into fed from a list of byte strings, one per call."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = list(chunks)
        self.calls = 0

    def __call__(self, view: memoryview) -> int:
        self.calls += 1
        if not self.chunks:
            raise _WouldBlock()
        chunk = self.chunks.pop(0)
        if chunk == b"":
            raise _PeerClosed()
        n = min(len(chunk), len(view))
        view[:n] = chunk[:n]
        if n < len(chunk):
            self.chunks.insert(0, chunk[n:])
        return n


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def test_frame_reader_reads_several_frames_from_one_recv():
    recv = _Chunks([framed(b"one") + framed(b"two") + framed(b"three")[:5]])
    reader = _FrameReader(recv, 1 << 20, chunk=64)
    assert bytes(reader.next_frame()) == b"one"
    assert bytes(reader.next_frame()) == b"two"
    assert recv.calls == 1
    with pytest.raises(_WouldBlock):
        reader.next_frame()
    recv.chunks.append(framed(b"three")[5:])
    assert bytes(reader.next_frame()) == b"three"
    recv.chunks.append(b"")
    with pytest.raises(_PeerClosed):
        reader.next_frame()


def test_frame_reader_resumes_after_would_block_and_handles_big_frames():
    big = bytes(range(256)) * 40  # 10 KB, bigger than the 64-byte read-ahead buffer
    stream = framed(b"small") + framed(big) + framed(b"after")
    pieces = [stream[i : i + 7] for i in range(0, len(stream), 7)]
    recv = _Chunks([])
    reader = _FrameReader(recv, 1 << 20, chunk=64)
    frames = []
    for piece in pieces:
        recv.chunks.append(piece)
        try:
            while True:
                frames.append(bytes(reader.next_frame()))
        except _WouldBlock:
            pass
    assert frames == [b"small", big, b"after"]


def test_api_versions_request_is_v3_with_client_name(fake_broker):
    connect(fake_broker)
    first = fake_broker.received[0].request
    assert isinstance(first, ApiVersionsRequest)
    assert first.client_software_name == "metaq"


def test_flexible_response_header_tagged_fields_are_skipped():
    from metaq.client.request_codec import _skip_tagged_fields

    # two tagged fields: tag 0 with 3 bytes, tag 1 with 0 bytes; then the body starts
    frame = memoryview(bytes([2, 0, 3, 0xAA, 0xBB, 0xCC, 1, 0]) + b"BODY")
    assert bytes(frame[_skip_tagged_fields(frame, 0):]) == b"BODY"
    assert _skip_tagged_fields(memoryview(b"\x00BODY"), 0) == 1


def test_a_broker_closing_on_api_versions_is_taken_for_an_old_one(caplog):
    """A Kafka 0.8/0.9 broker closes the connection on ApiVersions: the connection reconnects, takes the
    ranges of fake_broker.version.fallback, says so once per fake_broker, and a Fetch goes out at v0 and decodes
    the magic 0 message set it answers."""
    from kafka.protocol.consumer import FetchRequest, FetchResponse

    from metaq.protocol import legacy
    from metaq.protocol.records import decode_records

    with FakeBroker() as fake_broker:
        fake_broker.handlers[18] = lambda r: CLOSE
        records = legacy.build_message_set(0, 1, [(40 + i, -1, None, b"old-%d" % i) for i in range(3)])

        def fetch(r: Received):
            P = FetchResponse.FetchableTopicResponse.PartitionData
            return FetchResponse[r.version](throttle_time_ms=0, responses=[FetchResponse.FetchableTopicResponse(
                topic="t1", partitions=[P(partition_index=0, error_code=0, high_watermark=43, records=records)])])

        fake_broker.handlers[1] = fetch
        with caplog.at_level("WARNING", logger="metaq.client.connection"):
            first = connect(fake_broker, broker_version_fallback="0.8.2")
            second = connect(fake_broker, broker_version_fallback="0.8.2")
        assert first.api_version(1) == 0 and first.api_version(2) == 0
        assert sum("Kafka 0.8/0.9 broker" in m for m in caplog.messages) == 1
        response = second.send(FetchRequest, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "topics": [{"topic": "t1", "partitions": [
                {"partition": 0, "fetch_offset": 41, "partition_max_bytes": 1 << 20}]}]})
        assert fake_broker.received[-1].api_key == 1 and fake_broker.received[-1].version == 0
        data = response.responses[0].partitions[0].records
        assert [(r[0], r[3]) for r in decode_records(data, 41).records] == [(41, b"old-1"), (42, b"old-2")]
