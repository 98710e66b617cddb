"""Hostile admin input against a real broker (third round): what one request, ZooKeeper node or ops command can
do is bounded, and a well-behaved client keeps working beside it.

The well-behaved client is confluent-kafka (librdkafka): it commits, produces and reads back.
"""

from __future__ import annotations

import subprocess
import sys

import confluent_kafka

from integration_tests import peers
from metaq.broker.process import BrokerProcess
from metaq.testing.broker import wait_until
from zk_layout import ZkLayout


def metaq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "metaq", *args], capture_output=True, text=True, timeout=60)


def committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "enable.auto.commit": False})
    try:
        [tp] = consumer.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=30)
        return int(tp.offset)
    finally:
        consumer.close()


def test_internal_topics_are_never_deleted(broker: BrokerProcess, make_topic, zk_connect: str,
                                           zk_layout: ZkLayout) -> None:
    make_topic("kept")
    make_topic("doomed")
    peers.confluent_commit(broker.bootstrap, "g", "kept", 42)
    [offsets_dir] = (broker.data_dir / "logs-0").glob("__consumer_offsets-*")  # the group's partition

    # the ops command refuses, and marks nothing (before: "Deleted topic __consumer_offsets", exit 0)
    result = metaq("topics", "delete", "__consumer_offsets", "doomed", "--zookeeper", zk_connect)
    assert result.returncode == 1, result.stdout
    assert "__consumer_offsets is an internal topic" in result.stderr and "Traceback" not in result.stderr
    assert zk_layout.topics_marked_for_deletion() == []

    # hand-written markers: an internal topic's and an invalid name's are removed and logged; they do not
    # block the deletion of a real topic marked beside them
    client = zk_layout.client
    for name in ("__consumer_offsets", "__transaction_state", "no valid name"):
        client.create(f"/admin/delete_topics/{name}", b"", makepath=True)
    client.create("/admin/delete_topics/doomed", b"")
    wait_until(lambda: zk_layout.topics_marked_for_deletion() == [], 30, "every marker handled")
    assert zk_layout.topic_assignment("doomed") is None
    assert zk_layout.topic_assignment("__consumer_offsets") is not None
    log = broker.log_tail(400)
    assert "ignored and removed the deletion request /admin/delete_topics/__consumer_offsets" in log
    assert "ignored and removed the deletion request /admin/delete_topics/no valid name" in log
    assert offsets_dir.exists()
    assert committed(broker.bootstrap, "g", "kept") == 42
    peers.confluent_produce(broker.bootstrap, "kept", 0, [(b"k", b"v", 1_700_000_000_000)])
