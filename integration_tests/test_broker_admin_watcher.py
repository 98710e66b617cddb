"""AdminWatcher in-process against a real ZooKeeper: config notifications applied to the local logs, old
notifications purged, and a deletion marker carried out (logs, partition nodes, topic nodes, marker)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from metaq.broker import admin_watcher
from metaq.broker.admin_watcher import AdminWatcher
from metaq.broker.log.config import LogConfig
from metaq.broker.log.log_manager import LogManager
from metaq.broker.metadata import MetadataWatcher
from zk_layout import PartitionState, ZkLayout, paths

STATE = PartitionState(leader=0, leader_epoch=0, isr=(0,), controller_epoch=1)
BASE = LogConfig()


async def _until(predicate: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def test_configs_purge_and_deletion(zk_layout: ZkLayout, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    zk_layout.ensure_persistent_paths()
    zk_layout.create_topic("t", {0: [0], 1: [1]}, {0: STATE, 1: STATE}, config={"retention.ms": "5000"})
    zk_layout.set_topic_config("t", {"retention.ms": "5000"})  # an old notification, purged below
    logs = LogManager([tmp_path], BASE)
    logs.load()
    logs.get_or_create("t", 0)
    metadata = MetadataWatcher(zk_layout)
    metadata.start()

    async def scenario() -> None:
        admin = AdminWatcher(0, zk_layout, logs, metadata, BASE)
        await admin.start()
        try:
            log = logs.get("t", 0)
            assert log is not None and log.config.retention_ms == 5000  # applied at start
            monkeypatch.setattr(admin_watcher, "CHANGE_EXPIRATION_MS", -1)  # every notification is old now
            zk_layout.set_topic_config("t", {"segment.bytes": "4096"})
            await _until(lambda: log.config.segment_bytes == 4096 and log.config.retention_ms == BASE.retention_ms,
                         "the new config applied")
            await _until(lambda: zk_layout.config_changes() == [], "old notifications purged")

            zk_layout.mark_topic_for_deletion("t")
            await _until(lambda: logs.get("t", 0) is None, "the local log deleted")
            assert not list(tmp_path.glob("t-*"))
            # partition 1 is hosted by broker 1, which is not here: the topic waits for it
            await _until(lambda: zk_layout.remaining_partition_nodes("t") == [1], "our partition node removed")
            assert zk_layout.topics_marked_for_deletion() == ["t"]
            zk_layout.delete_partition_nodes("t", [1])  # as broker 1 would
            admin.kick()
            await _until(lambda: zk_layout.topics_marked_for_deletion() == [], "the marker removed")
            assert zk_layout.client.exists(paths.topic_path("t")) is None
            assert zk_layout.client.exists(paths.topic_config_path("t")) is None
        finally:
            await admin.stop()

    try:
        asyncio.run(scenario())
    finally:
        metadata.stop()
        logs.shutdown()
