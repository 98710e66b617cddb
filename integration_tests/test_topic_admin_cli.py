"""``metaq topics create --topic-config``, ``alter-config`` and ``delete`` against a running broker: effects
checked in ZooKeeper, in the broker's logs on disk, and through the brokers' own behaviour."""

from __future__ import annotations

import json
import subprocess
import sys

from integration_tests import peers
from metaq.testing.broker import topic_leaders
from metaq.testing.wait import wait_until
from zk_layout import ZkLayout


def metaq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "metaq", *args], capture_output=True, text=True, timeout=60)


def ok_json(*args: str) -> dict:
    result = metaq(*args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_topics_create_alter_config_delete(broker, zk_connect: str, zk_layout: ZkLayout) -> None:
    z = ["--zookeeper", zk_connect]
    ok_json("topics", "create", "--topic", "cli", "--partitions", "1", "--topic-config", "retention.ms=600000", *z)
    assert json.loads(zk_layout.client.get("/config/topics/cli")[0]) == {
        "version": 1, "config": {"retention.ms": "600000"}}
    wait_until(lambda: topic_leaders(broker.bootstrap, "cli") == {0: 0}, 30, "cli visible")

    out = ok_json("topics", "alter-config", "cli", "--set", "segment.bytes=1500", "--delete", "retention.ms", *z)
    assert out == {"topic": "cli", "config": {"segment.bytes": "1500"}}
    assert json.loads(zk_layout.client.get("/config/topics/cli")[0]) == {
        "version": 1, "config": {"segment.bytes": "1500"}}
    changes = zk_layout.client.get_children("/config/changes")
    assert [json.loads(zk_layout.client.get(f"/config/changes/{c}")[0]) for c in changes] == [
        {"version": 2, "entity_path": "topics/cli"}]

    log_dir = broker.data_dir / "logs-0" / "cli-0"

    def rolled() -> bool:  # applied by the running broker: its segments now roll at 1500 bytes
        peers.confluent_produce(broker.bootstrap, "cli", 0, [(b"k", b"x" * 200, 1_700_000_000_000)] * 3)
        return len(list(log_dir.glob("*.log"))) >= 2

    wait_until(rolled, 30, "a roll at segment.bytes=1500")

    bad = metaq("topics", "alter-config", "cli", "--set", "cleanup.policy=shred", *z)
    assert bad.returncode == 1 and "cleanup.policy" in bad.stderr and "Traceback" not in bad.stderr
    bad = metaq("topics", "alter-config", "nope", "--set", "retention.ms=1", *z)
    assert bad.returncode == 1 and "topic 'nope' does not exist" in bad.stderr
    bad = metaq("topics", "delete", "nope", *z)
    assert bad.returncode == 1 and "topic 'nope' does not exist" in bad.stderr

    assert ok_json("topics", "delete", "cli", *z) == {"deleted": ["cli"], "marked": []}
    for path in ("/brokers/topics/cli", "/config/topics/cli", "/admin/delete_topics/cli"):
        assert zk_layout.client.exists(path) is None, path
    assert not log_dir.exists()
