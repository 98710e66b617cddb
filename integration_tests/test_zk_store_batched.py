"""The pipelined / transactional ZkLayout calls a rebalance uses: same outcomes as their one-at-a-time forms."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_acl

from zk_layout import PartitionState, ZkLayout, paths

STATE = PartitionState(leader=0, leader_epoch=0, isr=(0,), controller_epoch=1)
KEYS = [("t", p) for p in range(5)] + [("u", 0)]


def test_claim_partitions_is_all_or_nothing(zk_layout: ZkLayout, make_zk_client: Callable[..., KazooClient]) -> None:
    other = ZkLayout(make_zk_client())
    assert other.claim_partition("g", "t", 3, "other-0")
    in_the_way = zk_layout.claim_partitions("g", {key: "me-0" for key in KEYS})
    assert in_the_way == {("t", 3): "other-0"}
    assert zk_layout.owners("g") == {("t", 3): "other-0"}  # nothing of ours was created
    assert other.release_partition("g", "t", 3, "other-0")
    assert zk_layout.claim_partitions("g", {key: "me-0" for key in KEYS}) == {}
    assert zk_layout.owners("g") == {key: "me-0" for key in KEYS}
    session = zk_layout.client.client_id[0]
    assert {zk_layout.client.get(paths.owner_path("g", *key))[1].ephemeralOwner for key in KEYS} == {session}


def test_claim_partitions_accepts_nodes_this_session_holds(zk_layout: ZkLayout) -> None:
    assert zk_layout.claim_partition("g", "t", 1, "me-0")
    assert zk_layout.claim_partitions("g", {key: "me-0" for key in KEYS}) == {}
    assert zk_layout.owners("g") == {key: "me-0" for key in KEYS}
    # ... but not for another thread id of ours: that is a conflict, as with claim_partition
    assert zk_layout.claim_partitions("g", {("t", 1): "me-1", ("t", 9): "me-1"}) == {("t", 1): "me-0"}
    assert zk_layout.owner("g", "t", 9) is None


def test_release_partitions_deletes_only_our_nodes(zk_layout: ZkLayout,
                                                   make_zk_client: Callable[..., KazooClient]) -> None:
    other = ZkLayout(make_zk_client())
    assert zk_layout.claim_partitions("g", {key: "me-0" for key in KEYS[:4]}) == {}
    assert other.claim_partition("g", "t", 4, "other-0")
    released = zk_layout.release_partitions("g", {key: "me-0" for key in KEYS})
    assert released == set(KEYS[:4])
    assert zk_layout.owners("g") == {("t", 4): "other-0"}
    assert zk_layout.release_partitions("g", {("t", 4): "me-0"}) == set()


def test_owners_of_and_its_watch(zk_layout: ZkLayout, make_zk_client: Callable[..., KazooClient]) -> None:
    other = ZkLayout(make_zk_client())
    assert other.claim_partition("g", "t", 0, "other-0")
    fired = threading.Event()
    owners = zk_layout.owners_of("g", [("t", 0), ("t", 1)], watch=lambda _event: fired.set())
    assert owners == {("t", 0): "other-0", ("t", 1): None}
    other.release_partition("g", "t", 0, "other-0")
    assert fired.wait(10)


def test_fence_offsets_batched_matches_one_at_a_time(zk_layout: ZkLayout, zk: KazooClient) -> None:
    zk_layout.write_offset("g", "t", 1, 42)
    fenced = zk_layout.fence_offsets("g", KEYS)
    assert list(fenced) == KEYS
    assert {key: f.offset for key, f in fenced.items()} == {key: 42 if key == ("t", 1) else None for key in KEYS}
    for key, f in fenced.items():
        data, stat = zk.get(paths.offset_path("g", *key))
        assert stat.version == f.version
        assert data == (b"42" if key == ("t", 1) else b"-1")
    again = zk_layout.fence_offsets("g", KEYS)
    assert all(again[key].version == fenced[key].version + 1 for key in KEYS)  # the previous fence is void
    versions, lost = zk_layout.commit_fenced_offsets("g", {key: (7, f.version) for key, f in fenced.items()})
    assert not versions and lost == set(KEYS)


def test_partition_states(zk_layout: ZkLayout) -> None:
    zk_layout.create_topic("t", {0: [0], 1: [0]}, {0: STATE})
    assert zk_layout.partition_states([("t", 0), ("t", 1), ("nope", 0)]) == {
        ("t", 0): STATE, ("t", 1): None, ("nope", 0): None}


def test_ensure_paths_creates_parents_first_and_accepts_existing_nodes_it_may_not_create(
        zk_layout: ZkLayout, zk: KazooClient) -> None:
    """All creates are sent at once, parents first. ZooKeeper checks the parent's CREATE permission before
    whether the node exists, so an existing node under a parent that refuses creates answers NoAuth: no
    error, as with kazoo's ensure_path (which asks first). A missing one there is an error."""
    zk.create("/locked/sub", makepath=True)
    zk.set_acls("/locked", [make_acl("world", "anyone", read=True)])
    zk_layout._ensure_paths(["/locked/sub/a/b", "/new/x", "/new/y/z"])
    assert all(zk.exists(path) for path in ("/locked/sub/a/b", "/new/x", "/new/y/z"))
    zk_layout._ensure_paths(["/locked/sub/a/b", "/new/x"])  # all there already
    with pytest.raises(NoAuthError):
        zk_layout._ensure_paths(["/locked/other/z"])


def test_fence_offsets_fences_a_rolled_back_multi_op_again_batched(zk_layout: ZkLayout, zk: KazooClient,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A node written between the read and the rewrite (the previous owner's last commit) fails its multi-op:
    the nodes rolled back with it (up to a thousand) are fenced again in a batch, not one at a time."""
    zk_layout.write_offset("g", "t", 1, 42)
    multi, one_at_a_time = zk_layout._multi, []
    rounds = []

    def racing_multi(*args: Any, **kwargs: Any) -> Any:
        if not rounds:
            zk.set(paths.offset_path("g", "t", 1), b"43")  # after our read, before our rewrite
        rounds.append(1)
        return multi(*args, **kwargs)

    monkeypatch.setattr(zk_layout, "_multi", racing_multi)
    monkeypatch.setattr(zk_layout, "_fence_one", lambda path: one_at_a_time.append(path))
    fenced = zk_layout.fence_offsets("g", KEYS)
    assert one_at_a_time == [] and len(rounds) == 2
    assert {key: f.offset for key, f in fenced.items()} == {key: 43 if key == ("t", 1) else None for key in KEYS}
    for key, f in fenced.items():
        assert zk.get(paths.offset_path("g", *key))[1].version == f.version
