"""aiokafka 0.14's AIOKafkaAdminClient against a metaq broker: each operation's effect checked in ZooKeeper
and on disk."""

from __future__ import annotations

import asyncio
import json

import pytest

from integration_tests import peers
from metaq.testing.broker import BrokerProcess
from zk_layout import ZkLayout

aiokafka = pytest.importorskip("aiokafka")
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete  # noqa: E402
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType  # noqa: E402
from aiokafka.structs import TopicPartition  # noqa: E402


def _config(zk_layout: ZkLayout, topic: str) -> dict:
    return json.loads(zk_layout.client.get(f"/config/topics/{topic}")[0])


async def _scenario(broker: BrokerProcess, zk_layout: ZkLayout) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        created = await admin.create_topics([NewTopic("aio", 1, 1, topic_configs={"retention.ms": "60000"})])
        assert [t[1] for t in created.topic_errors] == [0]  # (name, error_code, ...)
        assert _config(zk_layout, "aio") == {"version": 1, "config": {"retention.ms": "60000"}}

        described = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "aio")])
        entries = {entry[0]: entry[1] for entry in described[0].resources[0][4]}
        assert entries["retention.ms"] == "60000" and entries["cleanup.policy"] == "delete"

        altered = await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "aio",
                                                            {"retention.bytes": "123456"})])
        assert altered[0].resources[0][0] == 0
        assert _config(zk_layout, "aio") == {"version": 1, "config": {"retention.bytes": "123456"}}

        grown = await admin.create_partitions({"aio": NewPartitions(2)})
        assert grown.topic_errors[0][1] == 0
        assert sorted(json.loads(zk_layout.client.get("/brokers/topics/aio")[0])["partitions"]) == ["0", "1"]

        await asyncio.to_thread(peers.confluent_produce, broker.bootstrap, "aio", 0,
                                [(b"k", b"v%d" % i, 1_700_000_000_000 + i) for i in range(5)])
        low = await admin.delete_records({TopicPartition("aio", 0): RecordsToDelete(3)})
        assert low == {TopicPartition("aio", 0): 3}

        deleted = await admin.delete_topics(["aio"], timeout_ms=20000)
        assert [t[1] for t in deleted.topic_error_codes] == [0]
        assert zk_layout.client.exists("/brokers/topics/aio") is None
        assert zk_layout.client.exists("/admin/delete_topics/aio") is None
        assert not list((broker.data_dir / "logs-0").glob("aio-*"))
    finally:
        await admin.close()


def test_aiokafka_admin_client(broker_cluster, zk_layout: ZkLayout) -> None:
    broker = broker_cluster.add(0, **{"auto.create.topics.enable": "false"})
    asyncio.run(_scenario(broker, zk_layout))
