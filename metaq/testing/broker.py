"""pytest fixtures: real broker processes on the test's ZooKeeper chroot.

    def test_x(broker, make_topic):
        make_topic("t", partitions=3)          # created in ZooKeeper, visible to the broker
        ... talk to broker.bootstrap with any Kafka client ...
"""

from __future__ import annotations

import contextlib
import socket
import struct
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.config import Properties
from metaq.protocol.messages import ApiMessageLike, ApiResponse
from metaq.testing.wait import wait_until
from metaq.zkclient import session
from zk_layout import ZkLayout, split_connect


def request(bootstrap: str, req: ApiMessageLike, response_cls: type[ApiMessage], version: int,
            timeout: float = 10.0) -> ApiResponse:
    """One request/response over a fresh socket with kafka-python's codec (test helper)."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        return call(s, req, response_cls, version)


def fetch_error(bootstrap: str, topic: str, partition: int = 0, offset: int = 0) -> int:
    """The error code of a one-partition Fetch v4 (no wait) for ``topic``-``partition`` from ``offset``."""
    req = FetchRequest[4](
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
            FetchRequest.FetchTopic.FetchPartition(partition=partition, fetch_offset=offset,
                                                   partition_max_bytes=1 << 20)])],
    )
    return int(request(bootstrap, req, FetchResponse, 4).responses[0].partitions[0].error_code)


def call(s: socket.socket, req: ApiMessageLike, response_cls: type[ApiMessage], version: int,
         correlation_id: int = 1) -> ApiResponse:
    """One request/response on an open socket (test helper: SASL exchanges need the same connection)."""
    req.with_header(correlation_id=correlation_id, client_id="metaq-test")
    s.sendall(req.encode(header=True, framed=True))
    response: ApiResponse = response_cls.decode(read_frame(s), version=version, header=True)
    return response


def read_frame(s: socket.socket) -> bytes:
    """The body of the next size-prefixed frame."""
    size = struct.unpack(">i", _recv_exact(s, 4))[0]
    return _recv_exact(s, size)


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def topic_leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """partition -> leader broker id, as the broker answers Metadata v4 (no auto-creation)."""
    req = MetadataRequest[4](topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                             allow_auto_topic_creation=False)
    resp = request(bootstrap, req, MetadataResponse, 4)
    return {p.partition_index: p.leader_id for t in resp.topics for p in t.partitions if p.error_code == 0}


class BrokerCluster:
    def __init__(self, zk_connect: str, base_dir: Path) -> None:
        self.zk_connect = zk_connect
        self.base_dir = base_dir
        self.brokers: list[BrokerProcess] = []

    def add(self, broker_id: int | None = None, **properties: object) -> BrokerProcess:
        broker_id = len(self.brokers) if broker_id is None else broker_id
        broker = BrokerProcess(self.zk_connect, broker_id, self.base_dir, properties=properties)
        self.brokers.append(broker)
        return broker.start()

    def stop(self) -> None:
        for broker in self.brokers:
            broker.stop()


@pytest.fixture
def broker_cluster(zk_connect: str, tmp_path: Path) -> Iterator[BrokerCluster]:
    cluster = BrokerCluster(zk_connect, tmp_path)
    yield cluster
    cluster.stop()


@pytest.fixture
def broker(broker_cluster: BrokerCluster) -> BrokerProcess:
    return broker_cluster.add(0)


def _sees_all_partitions(bootstrap: str, topic: str, partitions: int) -> bool:
    return len(topic_leaders(bootstrap, topic)) == partitions


@pytest.fixture
def make_topic(zk_layout: ZkLayout, broker_cluster: BrokerCluster) -> Callable[..., str]:
    def make(name: str, partitions: int = 1) -> str:
        create_topic(zk_layout, name, partitions)
        for b in broker_cluster.brokers:
            wait_until(partial(_sees_all_partitions, b.bootstrap, name, partitions), 10,
                       f"topic {name} visible on broker {b.broker_id}")
        return name

    return make


@dataclass
class SharedBroker:
    """One broker process shared by the tests of a module, each test making its own topics."""

    broker: BrokerProcess
    zk_connect: str

    def topic(self, name: str, partitions: int = 1, config: Mapping[str, str] | None = None) -> str:
        """Create ``name`` (with topic ``config`` overrides) and wait until the broker serves it. The ZooKeeper
        client lives for this call only: a module-long one keeps a kazoo thread drawing from ``random`` (its ping
        jitter) while hypothesis tests run, which hypothesis reports as randomness inside their strategies."""
        with session(self.zk_connect) as client:
            create_topic(ZkLayout(client), name, partitions, config=config)
        wait_until(lambda: len(topic_leaders(self.broker.bootstrap, name)) == partitions, 20, f"topic {name}")
        return name


@contextlib.contextmanager
def shared_broker(zk_connect_string: str, directory: Path, prefix: str, *, properties: Properties | None = None,
                  nofile_limit: int | None = None) -> Iterator[SharedBroker]:
    """A broker on a fresh ZooKeeper chroot ``<prefix>-<uuid hex>`` under ``zk_connect_string``, for a
    module-scoped fixture; stopped on exit. ``properties`` and ``nofile_limit``: see BrokerProcess."""
    hosts, base = split_connect(zk_connect_string)
    zk_connect = f"{hosts}{base}/{prefix}-{uuid.uuid4().hex}"
    broker = BrokerProcess(zk_connect, 0, directory, properties=properties, nofile_limit=nofile_limit).start()
    try:
        yield SharedBroker(broker, zk_connect)
    finally:
        broker.stop()
