"""Splitting batches larger than one ZooKeeper multi-op (the outcomes against a real ZooKeeper:
integration_tests/test_zk_store_chunked.py)."""

from __future__ import annotations

from zk_layout._nodes import MULTI_OP_OVERHEAD, multi_chunks


def test_multi_chunks_bounds_ops_and_bytes() -> None:
    sizes = {"a": 10, "b": 10, "c": 500, "d": 10, "e": 10}
    chunks = multi_chunks(list(sizes), sizes.__getitem__, max_ops=3, max_bytes=510 + 2 * MULTI_OP_OVERHEAD)
    assert chunks == [["a", "b"], ["c", "d"], ["e"]]  # c, then e, would overflow the bytes
    assert multi_chunks(list(sizes), sizes.__getitem__, max_ops=2, max_bytes=10**6) == [["a", "b"], ["c", "d"], ["e"]]
    assert multi_chunks(["big"], lambda _: 10**7, max_ops=5, max_bytes=100) == [["big"]]  # never an empty chunk
