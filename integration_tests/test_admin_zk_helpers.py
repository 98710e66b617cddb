"""The zk_layout helpers the ops tools add, against a real ZooKeeper: offset and owner node stats, offsets
without a leader."""

from __future__ import annotations

import time

import pytest

from metaq.admin.log_offsets import BrokerLogOffsets
from metaq.errors import MetaqError
from zk_layout import PartitionState, ZkLayout


def test_offset_node_times_and_fences(zk_layout: ZkLayout) -> None:
    assert not zk_layout.group_exists("g")
    zk_layout.write_offset("g", "t", 0, 5)
    first = zk_layout.offset_node("g", "t", 0)
    time.sleep(0.02)
    zk_layout.write_offset("g", "t", 0, 9)
    zk_layout.fence_offsets("g", [("t", 1)])  # creates -1: "no offset"
    nodes = zk_layout.offset_nodes("g")
    assert first is not None and nodes[("t", 0)].offset == 9 and nodes[("t", 1)].offset is None
    assert nodes[("t", 0)].ctime_ms == first.ctime_ms < nodes[("t", 0)].mtime_ms
    assert abs(nodes[("t", 0)].mtime_ms - time.time() * 1000) < 60000
    assert zk_layout.group_exists("g") and zk_layout.offset_node("g", "t", 7) is None


def test_owner_node_reports_its_session(zk_layout: ZkLayout) -> None:
    assert zk_layout.claim_partition("g", "t", 2, "g_c1-0")
    node = zk_layout.owner_nodes("g")[("t", 2)]
    assert node.thread_id == "g_c1-0" and node.ephemeral
    assert node.session_id == zk_layout.client.client_id[0]
    assert zk_layout.owner_node("g", "t", 3) is None


def test_log_offsets_without_a_leader(zk_layout: ZkLayout) -> None:
    state = PartitionState(leader=-1, leader_epoch=0, isr=(), controller_epoch=1)
    zk_layout.create_topic("t", {0: [3], 1: [3]}, {0: state, 1: PartitionState(3, 0, (3,), 1)})
    logs = BrokerLogOffsets(zk_layout)
    try:
        marks = logs.watermarks([("t", 0), ("t", 1)])
        assert (marks[("t", 0)].known, marks[("t", 0)].error) == (False, "no leader")
        assert marks[("t", 1)].error == "leader 3 is not registered"
        with pytest.raises(MetaqError, match="cannot reach the leader of t-0 \\(no leader\\)"):
            logs.offsets_for_time([("t", 0)], 0)
    finally:
        logs.close()
