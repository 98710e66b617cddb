"""Hostile clients against a real broker: what one client can make the broker hold is bounded.

Each test runs the attack from raw sockets while a healthy client (kcat) keeps producing and consuming.
Attackers connect from 127.0.0.2 (or .3), which Linux routes to the loopback listener, so per-address
limits hit them and not the healthy client on 127.0.0.1.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator

import psutil
import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import MetadataRequest
from kafka.record.default_records import DefaultRecordBatchBuilder

from metaq.broker.process import BrokerProcess
from metaq.testing.broker import topic_leaders
from metaq.testing.probes import RssSampler, closed_by_peer
from metaq.testing.wait import wait_until

MAX_INT32 = 0x7FFFFFFF


# --- helpers ---------------------------------------------------------------------------------------

def _connect(bootstrap: str, source: str = "127.0.0.1", timeout: float = 10.0) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    s = socket.socket()
    s.settimeout(timeout)
    s.bind((source, 0))
    s.connect((host, int(port)))
    return s


def _recv_frame(s: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = s.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    (size,) = struct.unpack(">i", exact(4))
    return exact(size)


def _framed(req: object, correlation_id: int = 1) -> bytes:
    req.with_header(correlation_id=correlation_id, client_id="hostile")  # type: ignore[attr-defined]
    return bytes(req.encode(header=True, framed=True))  # type: ignore[attr-defined]


def _batch(n: int, value_size: int) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for i in range(n):
        b.append(i, timestamp=int(time.time() * 1000), key=None, value=b"x" * value_size, headers=[])
    return bytes(b.build())


def _produce(bootstrap: str, topic: str, partition: int, batches: list[bytes]) -> None:
    from kafka.protocol.producer import ProduceRequest, ProduceResponse

    from metaq.testing.broker import request

    for records in batches:
        req = ProduceRequest[3](transactional_id=None, acks=-1, timeout_ms=10000, topic_data=[
            ProduceRequest.TopicProduceData(name=topic, partition_data=[
                ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=records)])])
        resp = request(bootstrap, req, ProduceResponse, 3)
        errors = [p.error_code for t in resp.responses for p in t.partition_responses]
        assert errors == [0], errors


def _fetch_request(topic: str, partitions: list[int], *, max_bytes: int, partition_max_bytes: int) -> object:
    fp = FetchRequest.FetchTopic.FetchPartition
    return FetchRequest[4](replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, isolation_level=0,
                           topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                               fp(partition=p, fetch_offset=0, partition_max_bytes=partition_max_bytes)
                               for p in partitions])])


def _kcat_round_trip(bootstrap: str, topic: str) -> None:
    """A healthy client: kcat produces one message and reads it back."""
    marker = uuid.uuid4().hex
    subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", topic, "-p", "0"], input=marker.encode(),
                   check=True, timeout=30, capture_output=True)
    out = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "-1", "-e", "-q"],
                         check=True, timeout=30, capture_output=True).stdout.decode()
    assert marker in out, out


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    yield opened
    for s in opened:
        s.close()


# --- A: fetch ----------------------------------------------------------------------------------------

def test_fetch_naming_one_partition_thousands_of_times_is_answered_once(broker: BrokerProcess, make_topic) -> None:
    make_topic("dup", partitions=1)
    _produce(broker.bootstrap, "dup", 0, [_batch(200, 100)])  # ~21 KB: below the sendfile threshold
    req = _fetch_request("dup", [0] * 5000, max_bytes=MAX_INT32, partition_max_bytes=MAX_INT32)
    assert broker.pid is not None
    with RssSampler(broker.pid) as rss, _connect(broker.bootstrap) as s:
        s.sendall(_framed(req))
        frame = _recv_frame(s)
    _kcat_round_trip(broker.bootstrap, "dup")
    # before the fix: 5,000 copies of the partition, a ~105 MB response and RSS up by more than that
    assert len(frame) < 100_000, f"{len(frame)}-byte response"
    resp = FetchResponse.decode(frame, version=4, header=True)
    parts = [p for t in resp.responses for p in t.partitions]
    assert len(parts) == 1 and parts[0].error_code == 0 and len(parts[0].records) > 20_000
    assert rss.growth_mb < 40, f"broker RSS grew {rss.growth_mb:.0f} MB"


def test_fetch_max_bytes_caps_the_answer_and_a_large_first_batch_still_comes(broker_cluster, make_topic) -> None:
    broker = broker_cluster.add(0, **{"fetch.max.bytes": 65536})
    make_topic("capped")
    _produce(broker.bootstrap, "capped", 0, [_batch(20, 1000) for _ in range(10)])  # 10 batches of ~20 KB
    _produce(broker.bootstrap, "capped", 0, [_batch(1, 200_000)])  # one batch larger than fetch.max.bytes

    with _connect(broker.bootstrap) as s:
        # the client asks for 2 GB: the broker's fetch.max.bytes caps the answer
        s.sendall(_framed(_fetch_request("capped", [0], max_bytes=MAX_INT32, partition_max_bytes=MAX_INT32)))
        resp = FetchResponse.decode(_recv_frame(s), version=4, header=True)
        records = resp.responses[0].partitions[0].records
        assert 20_000 < len(records) <= 65536, len(records)
    # a consumer still gets the 200 KB message: the first batch comes whole (KIP-74)
    out = subprocess.run(["kcat", "-b", broker.bootstrap, "-C", "-t", "capped", "-p", "0", "-o", "200", "-c", "1",
                          "-e", "-q", "-f", "%S\n"], check=True, timeout=30, capture_output=True).stdout
    assert out.split() == [b"200000"], out


def test_fetch_of_several_partitions_honours_max_bytes(broker: BrokerProcess, make_topic) -> None:
    make_topic("multi", partitions=3)
    for p in range(3):
        _produce(broker.bootstrap, "multi", p, [_batch(10, 1000) for _ in range(3)])  # 3 batches of ~10 KB
    with _connect(broker.bootstrap) as s:
        # two partitions fill 24 KB of the 25 KB; the third's first batch (~10 KB) does not fit
        s.sendall(_framed(_fetch_request("multi", [0, 1, 2], max_bytes=25_000, partition_max_bytes=12_000)))
        resp = FetchResponse.decode(_recv_frame(s), version=4, header=True)
        sizes = [len(p.records or b"") for p in resp.responses[0].partitions]
        assert sizes == [12_000, 12_000, 0], sizes
        # max_bytes smaller than one batch: the first partition's first batch comes whole, nothing else
        s.sendall(_framed(_fetch_request("multi", [0, 1, 2], max_bytes=100, partition_max_bytes=100), 2))
        resp = FetchResponse.decode(_recv_frame(s), version=4, header=True)
        sizes = [len(p.records or b"") for p in resp.responses[0].partitions]
        assert sizes[0] > 10_000 and sizes[1:] == [0, 0], sizes


def test_a_slow_reader_of_a_large_answer_holds_little_broker_memory(broker: BrokerProcess, make_topic) -> None:
    from kafka.protocol.producer import ProduceRequest, ProduceResponse

    from metaq.testing.broker import request

    partitions = 500
    make_topic("wide", partitions=partitions)
    batch = _batch(30, 1000)  # ~30 KB: each partition's slice is read into memory, not sent with sendfile
    pd = ProduceRequest.TopicProduceData.PartitionProduceData
    req = ProduceRequest[3](transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        ProduceRequest.TopicProduceData(name="wide", partition_data=[pd(index=p, records=batch)
                                                                     for p in range(partitions)])])
    resp = request(broker.bootstrap, req, ProduceResponse, 3, timeout=60)
    assert {p.error_code for t in resp.responses for p in t.partition_responses} == {0}
    assert broker.pid is not None
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.settimeout(30)
    host, port = broker.bootstrap.rsplit(":", 1)
    slow.connect((host, int(port)))
    with slow, RssSampler(broker.pid) as rss:
        slow.sendall(_framed(_fetch_request("wide", list(range(partitions)), max_bytes=MAX_INT32,
                                            partition_max_bytes=MAX_INT32)))
        _kcat_round_trip(broker.bootstrap, "wide")  # meanwhile the broker serves others
        time.sleep(2)  # the slow reader reads nothing for a while: the broker must not buffer the ~15 MB answer
        frame = _recv_frame(slow)
    assert len(frame) > partitions * len(batch)
    assert rss.growth_mb < 8, f"broker RSS grew {rss.growth_mb:.0f} MB"


# --- B: connections ----------------------------------------------------------------------------------

def test_connections_over_the_per_ip_limit_are_refused_and_idle_ones_closed(broker_cluster, make_topic,
                                                                            sockets) -> None:
    broker = broker_cluster.add(0, **{"max.connections.per.ip": 5, "connections.max.idle.ms": 3000})
    make_topic("idle")
    sockets.extend(_connect(broker.bootstrap, "127.0.0.2") for _ in range(20))
    wait_until(lambda: sum(closed_by_peer(s) for s in sockets) >= 15, 15, "connections over the limit closed")
    # the healthy client, from another address, is not affected
    _kcat_round_trip(broker.bootstrap, "idle")
    # and the 5 that were admitted are closed once idle for connections.max.idle.ms
    wait_until(lambda: all(closed_by_peer(s) for s in sockets), 30, "idle connections closed")
    assert broker.proc is not None and broker.proc.poll() is None


def test_max_connections_bounds_all_connections(broker_cluster, sockets) -> None:
    broker = broker_cluster.add(0, **{"max.connections": 10})
    sockets.extend(_connect(broker.bootstrap, "127.0.0.3") for _ in range(25))
    wait_until(lambda: sum(closed_by_peer(s) for s in sockets) >= 15, 15, "connections over the limit closed")
    time.sleep(0.5)
    assert 0 < sum(not closed_by_peer(s) for s in sockets) <= 10  # (a probe may still hold a slot)
    for s in sockets:
        s.close()
    sockets.clear()
    # slots are given back when connections close
    wait_until(lambda: topic_leaders(broker.bootstrap, "none") == {}, 15, "a new connection served")


def test_slowloris_and_stalled_partial_frames_are_closed_after_the_body_deadline(broker_cluster, make_topic,
                                                                                 sockets) -> None:
    broker = broker_cluster.add(0, **{"socket.request.body.timeout.ms": 2000})
    make_topic("slow")
    assert broker.pid is not None
    # four clients announce 90 MB frames and send 20 MB of each, then stall
    stalled = [_connect(broker.bootstrap, "127.0.0.2") for _ in range(4)]
    sockets.extend(stalled)
    for s in stalled:
        s.sendall(struct.pack(">i", 90_000_000) + b"\0" * 20_000_000)
    # a slowloris keeps sending one byte at a time, never finishing its frame
    loris = _connect(broker.bootstrap, "127.0.0.2")
    sockets.append(loris)
    loris.sendall(struct.pack(">i", 1000))
    start = time.monotonic()
    while not closed_by_peer(loris) and time.monotonic() - start < 30:
        try:
            loris.send(b"\0")
        except OSError:
            break
        _kcat_round_trip(broker.bootstrap, "slow")  # the healthy client keeps working meanwhile
        time.sleep(0.2)
    assert closed_by_peer(loris), "slowloris still connected after 30 s"
    wait_until(lambda: all(closed_by_peer(s) for s in stalled), 30, "stalled partial frames closed")
    # their memory is given back
    wait_until(lambda: psutil.Process(broker.pid).memory_info().rss < 150e6, 15, "partial frames freed")
    assert "socket.request.body.timeout.ms" in broker.log_tail(200)


def test_queued_max_request_bytes_reads_one_large_frame_at_a_time(broker_cluster, sockets) -> None:
    broker = broker_cluster.add(0, **{"queued.max.request.bytes": 1_000_000})
    assert broker.pid is not None
    body = struct.pack(">hhi", 999, 0, 7) + bytes(40_000_000)  # a 40 MB frame, refused once read (API 999)
    frame = struct.pack(">i", len(body)) + body
    clients = [_connect(broker.bootstrap, "127.0.0.2", timeout=60) for _ in range(4)]
    sockets.extend(clients)
    errors: list[BaseException] = []

    def send(s: socket.socket) -> None:
        try:
            s.sendall(frame)
        except OSError:
            pass  # closed by the broker once it could not decode the frame
        except BaseException as e:
            errors.append(e)

    with RssSampler(broker.pid) as rss:
        threads = [threading.Thread(target=send, args=(s,), name=f"big-{i}") for i, s in enumerate(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        wait_until(lambda: all(closed_by_peer(s) for s in clients), 60, "big frames refused")
    assert not errors, errors
    # without the pool the four frames are held at once (160 MB); with it one at a time
    assert rss.growth_mb < 100, f"broker RSS grew {rss.growth_mb:.0f} MB"
    assert topic_leaders(broker.bootstrap, "none") == {}


# --- C: malformed requests ---------------------------------------------------------------------------

def test_truncated_metadata_request_creates_no_topic(broker: BrokerProcess, zk_layout) -> None:
    req = MetadataRequest[1](topics=[MetadataRequest.MetadataRequestTopic(name="garbage-topic-name")])
    wire = _framed(req)
    cut = wire[4:-6]  # the topic name's length now runs past the end of the frame
    with _connect(broker.bootstrap) as s:
        s.sendall(struct.pack(">i", len(cut)) + cut)
        wait_until(lambda: closed_by_peer(s), 15, "connection with a malformed frame closed")
    time.sleep(0.5)
    assert not [t for t in zk_layout.topics() if t.startswith("garbage")]
    assert "past the end" in broker.log_tail(50)


def test_one_metadata_request_auto_creates_a_bounded_number_of_topics(broker: BrokerProcess, zk_layout) -> None:
    from metaq.broker.handlers.metadata import AUTO_CREATE_MAX_PER_REQUEST
    from metaq.testing.broker import request

    names = [f"flood-{i}" for i in range(AUTO_CREATE_MAX_PER_REQUEST + 15)]
    req = MetadataRequest[1](topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names])
    from kafka.protocol.metadata import MetadataResponse

    resp = request(broker.bootstrap, req, MetadataResponse, 1, timeout=120)
    errors = {t.name: t.error_code for t in resp.topics}
    created = [t for t in zk_layout.topics() if t.startswith("flood-")]
    assert len(created) == AUTO_CREATE_MAX_PER_REQUEST, created
    assert sorted(n for n, e in errors.items() if e == 3) == sorted(set(names) - set(created))
