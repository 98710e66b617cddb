"""The embedded default for the Spark examples: a real ZooKeeper, one broker and a topic of fake page views.

    with embedded_cluster() as zk:                     # $ZOOKEEPER_CONNECT, if set, replaces the embedded server
        ensure_topic(zk, "clicks", partitions=4)
        produce_clicks(zk, "clicks", 1000)             # JSON: {"page": "/pricing", "user": "u17", "ms": 42}

Nothing here is needed to use the data source; it only lets ``spark-submit examples/...`` run on its own.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zk_layout import ZkLayout

log = logging.getLogger(__name__)

PAGES = ("/", "/pricing", "/docs", "/blog", "/signup", "/login", "/about", "/careers")
CLICK_SCHEMA = "page STRING, user STRING, ms INT"
"""The ``valueSchema`` of a fake click."""


@contextlib.contextmanager
def embedded_cluster() -> Iterator[str]:
    """Start ZooKeeper (unless ``$ZOOKEEPER_CONNECT`` names one) and a broker; yields ``zookeeper.connect``
    with a fresh chroot. Everything is stopped and deleted on exit."""
    from metaq.broker.process import BrokerProcess
    from metaq.zkserver import ZooKeeperServer

    work = Path(tempfile.mkdtemp(prefix="metaq-spark-example-"))
    external = os.environ.get("ZOOKEEPER_CONNECT")
    server = None
    if not external:
        server = ZooKeeperServer(data_dir=work / "zk", force_sync=False).start()
    zk = f"{external or server.connect_string}/metaq-spark-{uuid.uuid4().hex[:8]}"  # type: ignore[union-attr]
    broker = None
    try:
        broker = BrokerProcess(zk, 0, work, log_level="WARNING").start()
        log.info("embedded broker at %s, ZooKeeper %s", broker.bootstrap, zk)
        yield zk
    finally:
        if broker is not None:
            broker.stop()
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


def ensure_topic(zk: str, topic: str, partitions: int) -> None:
    """Create ``topic`` unless it exists, and wait until its partitions have leaders."""
    from metaq.broker.topics import create_topic
    from metaq.errors import TopicExistsError
    from metaq.zkclient import session
    from zk_layout import ZkLayout

    with session(zk) as client:
        layout = ZkLayout(client)
        with contextlib.suppress(TopicExistsError):
            create_topic(layout, topic, partitions)
        deadline = time.monotonic() + 30  # a fresh broker picks a topic up within a second or two
        while not _has_leaders(layout, topic) and time.monotonic() < deadline:
            time.sleep(0.1)


def _has_leaders(layout: ZkLayout, topic: str) -> bool:
    assignment = layout.topic_assignment(topic)
    if assignment is None:
        return False
    return all((state := layout.partition_state(topic, p)) is not None and state.leader >= 0
               for p in assignment.partitions)


def fake_click(rng: random.Random) -> tuple[bytes, bytes]:
    """(key, value) of one page view: the user is the key, so one user's views stay in order."""
    user = f"u{rng.randrange(50)}"
    value = {"page": rng.choice(PAGES), "user": user, "ms": rng.randrange(5, 500)}
    return user.encode(), json.dumps(value, separators=(",", ":")).encode()


def produce_clicks(zk: str, topic: str, count: int, seed: int | None = None) -> None:
    """Produce ``count`` fake page views and wait for every acknowledgement."""
    from metaq import Producer

    rng = random.Random(seed)
    with Producer({"zookeeper.connect": zk, "linger.ms": 5}) as producer:
        for _ in range(count):
            key, value = fake_click(rng)
            producer.send(topic, value, key=key)
        producer.flush()


class ClickStream(threading.Thread):
    """Produces fake page views at ``rate`` per second until :meth:`finish`; counts what was acknowledged."""

    def __init__(self, zk: str, topic: str, rate: float) -> None:
        super().__init__(name="click-stream", daemon=True)
        self.zk, self.topic, self.rate = zk, topic, rate
        self.sent = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        from metaq import Producer

        rng = random.Random()
        with Producer({"zookeeper.connect": self.zk, "linger.ms": 5}) as producer:
            while not self._stop_event.wait(0.1):  # a tenth of a second's worth per round
                for _ in range(max(1, int(self.rate / 10))):
                    key, value = fake_click(rng)
                    producer.send(self.topic, value, key=key)
                    self.sent += 1
            producer.flush()

    def finish(self, timeout: float = 30.0) -> int:
        self._stop_event.set()
        self.join(timeout)  # bounded: the producer flushes what is buffered, then closes
        return self.sent
