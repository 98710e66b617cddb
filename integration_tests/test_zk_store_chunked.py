"""Batches larger than one ZooKeeper multi-op: claims, releases, fences and commits split into bounded
multi-ops keep the outcomes of one transaction (claims all or nothing, fencing intact)."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from zk_layout import ZkLayout, _nodes

KEYS = [(f"t{p % 3}", p) for p in range(40)]


@pytest.fixture
def small_multis(monkeypatch: pytest.MonkeyPatch) -> None:
    """Multi-ops of 7 keys at most, so that 40 keys take six of them."""
    monkeypatch.setattr(_nodes, "MULTI_MAX_OPS", 7)


@pytest.mark.usefixtures("small_multis")
def test_chunked_claim_is_all_or_nothing(zk_layout: ZkLayout, make_zk_client: Callable[..., KazooClient]) -> None:
    other = ZkLayout(make_zk_client())
    assert other.claim_partition("g", *KEYS[30], "other-0")  # in the way of the fifth multi-op only
    in_the_way = zk_layout.claim_partitions("g", dict.fromkeys(KEYS, "me-0"))
    assert in_the_way == {KEYS[30]: "other-0"}
    assert zk_layout.owners("g") == {KEYS[30]: "other-0"}  # what the other multi-ops created was undone
    assert other.release_partition("g", *KEYS[30], "other-0")
    assert zk_layout.claim_partitions("g", dict.fromkeys(KEYS, "me-0")) == {}
    assert zk_layout.owners("g") == dict.fromkeys(KEYS, "me-0")
    assert zk_layout.release_partitions("g", dict.fromkeys(KEYS, "me-0")) == set(KEYS)
    assert zk_layout.owners("g") == {}


@pytest.mark.usefixtures("small_multis")
def test_chunked_fence_and_commit_keep_fencing(zk_layout: ZkLayout) -> None:
    zk_layout.write_offset("g", *KEYS[3], 42)  # one node exists, the others are created by the fence
    old = zk_layout.fence_offsets("g", KEYS)
    assert {key: f.offset for key, f in old.items()} == {key: 42 if key == KEYS[3] else None for key in KEYS}
    versions, lost = zk_layout.commit_fenced_offsets("g", {key: (7, f.version) for key, f in old.items()})
    assert set(versions) == set(KEYS) and not lost
    new = zk_layout.fence_offsets("g", KEYS)  # a new owner of all of them
    assert all(new[key].version == versions[key] + 1 and new[key].offset == 7 for key in KEYS)
    # the previous owner commits against its versions: refused for every partition, none written
    versions2, lost2 = zk_layout.commit_fenced_offsets("g", {key: (9, v) for key, v in versions.items()})
    assert versions2 == {} and lost2 == set(KEYS)
    # the new owner, partly fenced again by a third one meanwhile: the others are still committed
    third = zk_layout.fence_offsets("g", KEYS[10:12])
    versions3, lost3 = zk_layout.commit_fenced_offsets("g", {key: (11, f.version) for key, f in new.items()})
    assert lost3 == set(KEYS[10:12]) and set(versions3) == set(KEYS) - set(KEYS[10:12])
    assert zk_layout.offsets("g") == {key: 7 if key in third else 11 for key in KEYS}


def test_fence_and_commit_more_than_one_multi_op_holds(zk_layout: ZkLayout) -> None:
    """3,500 partitions of topics with long names: one multi-op creating them all is larger than ZooKeeper's
    default jute.maxbuffer (1 MB), which the server answers by closing the connection."""
    keys = [(f"{p // 1000}-" + "t" * 240, p % 1000) for p in range(3_500)]
    fenced = zk_layout.fence_offsets("g", keys)
    assert len(fenced) == len(keys) and all(f.offset is None for f in fenced.values())
    versions, lost = zk_layout.commit_fenced_offsets("g", {key: (i, fenced[key].version) for i, key in enumerate(keys)})
    assert len(versions) == len(keys) and not lost
    assert zk_layout.read_offset("g", *keys[-1]) == len(keys) - 1


@pytest.mark.parametrize("multi_read", [True, False], ids=["multiRead", "pipelined getData"])
def test_read_many_matches_get(zk_layout: ZkLayout, monkeypatch: pytest.MonkeyPatch, multi_read: bool) -> None:
    monkeypatch.setattr(_nodes._Nodes, "_multi_read", multi_read)
    client = zk_layout.client
    client.ensure_path("/r")
    for i in range(5):
        client.create(f"/r/n{i}", f"value-{i}".encode() * i)
    wanted = {i: f"/r/n{i}" for i in range(7)}  # 5 and 6 do not exist
    got = zk_layout._read_many(wanted)
    assert list(got) == list(wanted)
    for i in range(5):
        assert got[i] == client.get(f"/r/n{i}")
    assert all(type(got[i]).__name__ == "NoNodeError" for i in (5, 6))
    assert zk_layout._read_many({}) == {}


def test_read_many_falls_back_on_a_server_without_multi_read(zk_layout: ZkLayout,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """ZooKeeper 3.4/3.5 answer the unknown opcode with an empty reply (nothing to decode)."""
    monkeypatch.setattr(_nodes._Nodes, "_multi_read", True)

    def empty_reply(data: bytes, offset: int) -> list[object]:
        raise struct.error("unpack_from requires a buffer of at least 9 bytes")

    monkeypatch.setattr(_nodes._MultiRead, "deserialize", staticmethod(empty_reply))
    zk_layout.client.create("/old", b"v", makepath=True)
    got = zk_layout._read_many({"a": "/old", "b": "/missing"})
    assert got["a"] == zk_layout.client.get("/old") and type(got["b"]).__name__ == "NoNodeError"
    assert _nodes._Nodes._multi_read is False  # remembered: no second try
