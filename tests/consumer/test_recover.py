"""The recover store on its own (tmp_path only): durability, torn tails, compaction, replay, sharing."""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from pathlib import Path

import pytest

from metaq.consumer.message import MessageAndMetadata
from metaq.consumer.recover import RecoverManager, RecoverStore, ReplayResult, recover_stores
from metaq.errors import StorageError
from metaq.testing.wait import wait_until


def msg(offset: int, value: bytes | None = None, partition: int = 0, topic: str = "clicks") -> MessageAndMetadata:
    value = value if value is not None else b"v%d" % offset
    return MessageAndMetadata(topic, partition, offset, b"k%d" % offset, value, 1_700_000_000_000 + offset,
                              (("trace", b"t%d" % offset), ("empty", None)))


def open_store(tmp_path: Path, topic: str = "clicks", group: str = "etl") -> RecoverStore:
    return RecoverStore.open(tmp_path, topic, group)


def log_path(tmp_path: Path, topic: str = "clicks", group: str = "etl") -> Path:
    return tmp_path / f"{topic}@{group}.recover"


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        message = MessageAndMetadata("clicks", 3, 42, None, b"\x00\xffpayload", 1234, (("h", b"x"), ("n", None)))
        entry_id = store.append(message, ValueError("bad payload"))
        [entry] = store.list()
    assert entry.id == entry_id and len(entry_id) == 32
    assert entry.to_message() == message
    assert (entry.attempts, entry.dead, entry.last_error) == (0, False, "ValueError: bad payload")
    assert abs(entry.stored_at_ms - time.time() * 1000) < 60_000


def test_survives_reopen(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        ids = [store.append(msg(i), RuntimeError(str(i))) for i in range(5)]
    with open_store(tmp_path) as store:
        assert [e.id for e in store.list()] == ids
        assert [e.to_message() for e in store.list()] == [msg(i) for i in range(5)]


def test_same_message_is_stored_once(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        first = store.append(msg(7), RuntimeError("a"))
        assert store.append(msg(7), RuntimeError("b")) == first
        assert store.append(msg(7, value=b"other"), RuntimeError("c")) != first  # same offset, other content
        assert len(store.list()) == 2


def test_only_raw_bytes_are_stored(tmp_path: Path) -> None:
    with open_store(tmp_path) as store, pytest.raises(TypeError, match="raw bytes"):
        store.append(MessageAndMetadata("clicks", 0, 0, None, {"decoded": 1}, 0), RuntimeError())


@pytest.mark.parametrize("cut", [1, 5, 9, 20])
def test_torn_tail_is_dropped_with_a_warning(tmp_path: Path, cut: int, caplog: pytest.LogCaptureFixture) -> None:
    with open_store(tmp_path) as store:
        ids = [store.append(msg(i), RuntimeError()) for i in range(3)]
    path = log_path(tmp_path)
    os.truncate(path, path.stat().st_size - cut)  # a crash in the middle of the last append
    with caplog.at_level(logging.WARNING), open_store(tmp_path) as store:
        assert [e.id for e in store.list()] == ids[:2]
        assert "dropping" in caplog.text
        store.append(msg(9), RuntimeError())  # appends after the cut stay readable
    with open_store(tmp_path) as store:
        assert [e.offset for e in store.list()] == [0, 1, 9]


def test_garbage_after_the_last_frame_is_dropped(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        store.append(msg(0), RuntimeError())
    with open(log_path(tmp_path), "ab") as f:
        f.write(b"\x00" * 64)  # a zero-filled tail, as some filesystems leave after a crash
    with open_store(tmp_path) as store:
        assert [e.offset for e in store.list()] == [0]


def test_a_foreign_file_is_refused_not_clobbered(tmp_path: Path) -> None:
    log_path(tmp_path).write_bytes(b"not a recover store at all")
    with pytest.raises(StorageError, match="not a metaq recover store"):
        open_store(tmp_path)
    assert log_path(tmp_path).read_bytes() == b"not a recover store at all"


def test_open_compacts_superseded_records_atomically(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        ids = [store.append(msg(i, value=b"x" * 1000), RuntimeError()) for i in range(10)]
        assert store.drop(ids[:5]) == 5
        store.replay(lambda m: 1 / 0, max_attempts=3)  # five 'upd' records
    path = log_path(tmp_path)
    before = path.stat().st_size
    with open_store(tmp_path) as store:
        after = path.stat().st_size
        assert [e.id for e in store.list()] == ids[5:]
        assert all(e.attempts == 1 for e in store.list())
    assert after < before
    assert not list(tmp_path.glob("*.tmp"))
    with open_store(tmp_path):
        assert path.stat().st_size == after  # nothing left to compact


def test_replay_continues_past_failures(tmp_path: Path) -> None:
    seen: list[int] = []

    def handler(m: MessageAndMetadata) -> None:
        seen.append(m.offset)
        if m.offset == 1:
            raise ValueError("still broken")

    with open_store(tmp_path) as store:
        for i in range(3):
            store.append(msg(i), RuntimeError("first"))
        assert store.replay(handler, max_attempts=5) == ReplayResult(succeeded=2, failed=1, dead=0)
        assert seen == [0, 1, 2]
        [left] = store.list()
    assert (left.offset, left.attempts, left.last_error, left.dead) == (1, 1, "ValueError: still broken", False)


def test_attempts_cap_marks_dead_and_stops_automatic_replay(tmp_path: Path) -> None:
    calls: list[int] = []

    def failing(m: MessageAndMetadata) -> None:
        calls.append(m.offset)
        raise RuntimeError("nope")

    with open_store(tmp_path) as store:
        store.append(msg(0), RuntimeError())
        results = [store.replay(failing, max_attempts=3) for _ in range(4)]
        assert results == [ReplayResult(failed=1), ReplayResult(failed=1), ReplayResult(dead=1), ReplayResult()]
        assert calls == [0, 0, 0]
        assert store.list(include_dead=False) == []
        [dead] = store.list()
        assert (dead.attempts, dead.dead) == (3, True)
    with open_store(tmp_path) as store:  # dead survives a reopen; a manual replay may still take it
        assert store.list()[0].dead
        assert store.replay(lambda m: None, max_attempts=3, include_dead=True) == ReplayResult(succeeded=1)
        assert store.list() == []


def test_replay_stops_between_entries_when_asked(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        for i in range(5):
            store.append(msg(i), RuntimeError())
        done: list[int] = []
        result = store.replay(done.append, max_attempts=2, should_stop=lambda: len(done) >= 2)
        assert result.succeeded == 2 and len(store.list()) == 3


def test_drop(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        ids = [store.append(msg(i), RuntimeError()) for i in range(4)]
        assert store.drop([ids[1], "no-such-id", ids[1]]) == 1
        assert store.remove(ids[0]) is True
        assert store.remove(ids[0]) is False
        assert store.drop() == 2
        assert store.drop() == 0
    with open_store(tmp_path) as store:
        assert store.list() == []


def test_concurrent_appends_lose_nothing(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        def worker(partition: int) -> None:
            for i in range(40):
                store.append(msg(i, partition=partition), RuntimeError())

        threads = [threading.Thread(target=worker, args=(p,), name=f"append-{p}") for p in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(store.list()) == 320
    with open_store(tmp_path) as store:
        assert sorted((e.partition, e.offset) for e in store.list()) == [(p, i) for p in range(8) for i in range(40)]


def test_two_handles_share_one_store_like_two_processes(tmp_path: Path) -> None:
    """flock locks belong to open file descriptions, so two handles exclude each other as processes would."""
    a = open_store(tmp_path)
    b = open_store(tmp_path)
    try:
        first = a.append(msg(0), RuntimeError())
        assert [e.id for e in b.list()] == [first]  # b catches up with a's appends
        b.remove(first)
        b.append(msg(1), RuntimeError())
        b.compact()  # replaces the file under a's feet
        a.append(msg(2), RuntimeError())  # a notices, reloads, appends to the new file
        assert [e.offset for e in b.list()] == [1, 2]
    finally:
        a.close()
        b.close()
    with open_store(tmp_path) as store:
        assert [e.offset for e in store.list()] == [1, 2]


def test_only_one_replay_pass_at_a_time(tmp_path: Path) -> None:
    a = open_store(tmp_path)
    b = open_store(tmp_path)
    try:
        a.append(msg(0), RuntimeError())
        inner: list[ReplayResult] = []
        a.replay(lambda m: inner.append(b.replay(lambda m: None, max_attempts=2)), max_attempts=2)
        assert inner == [ReplayResult(busy=True)]
        assert a.list() == []
    finally:
        a.close()
        b.close()


def test_closed_store_refuses_work(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.close()
    store.close()
    with pytest.raises(StorageError, match="closed"):
        store.list()


def test_recover_stores_lists_topic_group_pairs(tmp_path: Path) -> None:
    assert recover_stores(tmp_path / "missing") == []
    for topic, group in [("clicks", "etl"), ("views", "etl"), ("clicks", "audit.v2")]:
        open_store(tmp_path, topic, group).close()
    (tmp_path / "unrelated.txt").write_text("x")
    assert recover_stores(tmp_path) == [("clicks", "audit.v2"), ("clicks", "etl"), ("views", "etl")]


def test_bad_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="invalid topic"):
        RecoverStore.open(tmp_path, "../x", "etl")


# -- a property: any crash point leaves a prefix of the operations --------------------------------
# (seeded histories rather than hypothesis: kazoo threads of the session's ZooKeeper fixtures use the
# global random module, which hypothesis reports as a deprecation when both run in one session)


def _history(seed: int) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    return [(rng.choice(["append", "append", "fail", "remove"]), rng.randrange(6)) for _ in range(25)]


@pytest.mark.parametrize("seed", range(6))
def test_any_truncation_recovers_a_prefix_of_the_history(tmp_path: Path, seed: int) -> None:
    root = tmp_path / "store"
    path = log_path(root, "t", "g")
    snapshots: list[tuple[int, dict[int, int]]] = []  # (file size, offset -> attempts) after each operation
    with RecoverStore.open(root, "t", "g") as store:
        snapshots.append((path.stat().st_size, {}))
        for op, n in _history(seed):
            _apply_op(store, op, n)
            snapshots.append((path.stat().st_size, {e.offset: e.attempts for e in store.list()}))
    original = path.read_bytes()
    boundaries = sorted({size for size, _ in snapshots})
    cuts = {b + d for b in boundaries for d in (-9, -1, 0, 1, 5, 20)}
    for cut in sorted(c for c in cuts if boundaries[0] <= c <= len(original)):
        path.write_bytes(original[:cut])  # a crash that kept only the first ``cut`` bytes
        with RecoverStore.open(root, "t", "g") as store:
            got = {e.offset: e.attempts for e in store.list()}
        assert got == [state for size, state in snapshots if size <= cut][-1], f"cut at {cut}"


def _apply_op(store: RecoverStore, op: str, n: int) -> None:
    if op == "append":
        store.append(msg(n), RuntimeError())
        return
    target = [e for e in store.list() if e.offset == n]
    if not target:
        return
    if op == "remove":
        store.remove(target[0].id)
    else:
        store._update(target[0].id, target[0].attempts + 1, "again", False)


# -- the recover thread -------------------------------------------------------------------------


def test_manager_replays_after_the_initial_delay_then_every_interval(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.append(msg(0), RuntimeError())
    store.append(msg(1), RuntimeError())
    delivered: list[tuple[int, str]] = []
    healthy = threading.Event()

    def handler(m: MessageAndMetadata) -> None:
        if not healthy.is_set():
            raise RuntimeError("not yet")
        delivered.append((m.offset, threading.current_thread().name))

    manager = RecoverManager(store, handler, interval_ms=100, max_attempts=1000, initial_delay_s=0.05)
    manager.start()
    try:
        wait_until(lambda: manager.passes >= 2, 5)
        assert store.list()[0].attempts >= 2 and delivered == []
        healthy.set()
        wait_until(lambda: not store.list(), 5)
        assert delivered == [(0, "metaq-recover-clicks@etl"), (1, "metaq-recover-clicks@etl")]
    finally:
        assert manager.stop(5)
        store.close()


def test_manager_stop_is_bounded_and_a_failing_pass_does_not_kill_it(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    store = open_store(tmp_path)
    store.append(msg(0), RuntimeError())
    entered, release = threading.Event(), threading.Event()

    def blocking(m: MessageAndMetadata) -> None:
        entered.set()
        release.wait(10)

    manager = RecoverManager(store, blocking, interval_ms=60_000, max_attempts=5, initial_delay_s=0.0)
    manager.start()
    wait_until(entered.is_set, 10, "the pass to block in the handler")
    started = time.monotonic()
    assert manager.stop(0.3) is False
    assert time.monotonic() - started < 5  # gave up at its timeout, long before the handler's 10 s
    release.set()
    wait_until(lambda: manager.last_result is not None, 5)
    store.close()

    broken = open_store(tmp_path, "views")
    broken.append(msg(0, topic="views"), RuntimeError())
    manager = RecoverManager(broken, lambda m: None, interval_ms=50, max_attempts=5, initial_delay_s=0.0)
    broken.close()  # every pass now fails inside the store
    manager.start()
    wait_until(lambda: sum("replay pass failed" in r.getMessage() for r in caplog.records) >= 2, 10,
               "two failed replay passes")
    assert manager._thread.is_alive()
    assert manager.stop(5)
