"""LogManager: loading directories, clean shutdown, checkpoints, flush policy, retention."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from metaq.broker.log import log_manager as manager_module
from metaq.broker.log.checkpoint import read_checkpoint
from metaq.broker.log.config import LogConfig
from metaq.broker.log.loader import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT, parse_log_dir_name
from metaq.broker.log.log_manager import LogManager
from metaq.broker.log.partition_log import PartitionLog
from metaq.errors import StorageError, TopicError
from tests.broker import make_batch, make_values


def new_manager(dirs: list[Path], **config: int | None) -> LogManager:
    manager = LogManager(dirs, LogConfig(**config))  # type: ignore[arg-type]
    manager.load()
    return manager


@pytest.fixture
def open_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, bool, int]]:
    """Record how the manager opens each log: (topic, partition, recover, recovery_point)."""
    calls: list[tuple[str, int, bool, int]] = []
    original = PartitionLog.open.__func__  # type: ignore[attr-defined]

    def spy(
        cls: type[PartitionLog],
        directory: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        *,
        recover: bool,
        recovery_point: int = 0,
    ) -> PartitionLog:
        calls.append((topic, partition, recover, recovery_point))
        return original(cls, directory, topic, partition, config, recover=recover, recovery_point=recovery_point)

    monkeypatch.setattr(manager_module.PartitionLog, "open", classmethod(spy))
    return calls


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("clicks-0", ("clicks", 0)),
        ("my-topic.v2-17", ("my-topic.v2", 17)),
        ("a--3", ("a-", 3)),
        ("clicks", None),
        ("-3", None),
        ("clicks-x", None),
        ("clicks-", None),
        ("clicks--1", ("clicks-", 1)),
        ("clicks-0.abc-delete", None),
    ],
)
def test_parse_log_dir_name(name: str, parsed: tuple[str, int] | None) -> None:
    assert parse_log_dir_name(name) == parsed


def test_create_spreads_over_dirs(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    manager = new_manager(dirs)
    assert all(d.is_dir() for d in dirs)
    for p in range(6):
        manager.get_or_create("t", p)
    counts = {d: sum(e.is_dir() for e in d.iterdir()) for d in dirs}  # partition directories
    assert set(counts.values()) == {2}
    log = manager.get_or_create("t", 0)
    assert manager.get_or_create("t", 0) is log and manager.get("t", 0) is log
    assert manager.get("t", 99) is None
    assert len(manager.logs()) == 6
    manager.shutdown()


@pytest.mark.parametrize(("topic", "partition"), [("../x", 0), ("a/b", 0), ("..", 0), ("", 0), ("ok", -1)])
def test_illegal_names_refused(tmp_path: Path, topic: str, partition: int) -> None:
    manager = new_manager([tmp_path])
    with pytest.raises(TopicError):
        manager.get_or_create(topic, partition)


def test_clean_shutdown_then_load_trusts_files(tmp_path: Path, open_calls: list) -> None:
    manager = new_manager([tmp_path])
    manager.get_or_create("my-topic.v2", 1).append(make_batch(make_values(5)))
    manager.get_or_create("other", 0).append(make_batch(make_values(2)))
    manager.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert read_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT) == {("my-topic.v2", 1): 5, ("other", 0): 2}
    open_calls.clear()
    manager = new_manager([tmp_path])
    assert sorted(open_calls) == [("my-topic.v2", 1, False, 0), ("other", 0, False, 0)]
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    log = manager.get("my-topic.v2", 1)
    assert log is not None and log.log_end_offset == 5 and log.recovery_point == 5
    manager.shutdown()


def test_unclean_load_recovers_from_checkpoint(tmp_path: Path, open_calls: list) -> None:
    manager = new_manager([tmp_path])
    log = manager.get_or_create("t", 0)
    log.append(make_batch(make_values(4)))
    log.flush()
    manager.checkpoint_recovery_points()
    log.append(make_batch(make_values(3)))
    # "Crash": no shutdown, no marker; the dying process's locks go away.
    manager.release_locks()
    open_calls.clear()
    manager = new_manager([tmp_path])
    assert open_calls == [("t", 0, True, 4)]
    reloaded = manager.get("t", 0)
    assert reloaded is not None and reloaded.log_end_offset == 7 and reloaded.recovery_point == 4
    manager.shutdown()


def test_malformed_recovery_checkpoint_recovers_everything(
    tmp_path: Path, open_calls: list, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "t-0").mkdir()
    (tmp_path / RECOVERY_POINT_CHECKPOINT).write_text("0\n5\nbroken\n")
    with caplog.at_level(logging.WARNING):
        manager = new_manager([tmp_path])
    assert open_calls == [("t", 0, True, 0)]
    assert f"{tmp_path / RECOVERY_POINT_CHECKPOINT}:2" in caplog.text
    manager.shutdown()


def test_unrelated_entries_ignored_and_delete_dirs_removed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "meta.properties").write_text("version=0\n")
    (tmp_path / "not_a_log").mkdir()
    (tmp_path / "t-0.0123abcd-delete").mkdir()
    (tmp_path / "t-0.0123abcd-delete" / "00000000000000000000.log").write_bytes(b"")
    (tmp_path / "t-2").mkdir()
    with caplog.at_level(logging.WARNING):
        manager = new_manager([tmp_path])
    assert [(log.topic, log.partition) for log in manager.logs()] == [("t", 2)]
    assert "not_a_log" in caplog.text
    assert not (tmp_path / "t-0.0123abcd-delete").exists()
    assert (tmp_path / "meta.properties").exists()
    manager.shutdown()


def test_duplicate_partition_across_dirs(tmp_path: Path) -> None:
    (tmp_path / "a" / "t-0").mkdir(parents=True)
    (tmp_path / "b" / "t-0").mkdir(parents=True)
    with pytest.raises(StorageError, match="duplicate") as excinfo:
        new_manager([tmp_path / "a", tmp_path / "b"])
    assert f"{tmp_path / 'a' / 't-0'} and {tmp_path / 'b' / 't-0'}" in str(excinfo.value)
    assert _open_files_under(tmp_path) == []  # the log of "a" that load() opened was closed again


def _open_files_under(directory: Path) -> list[str]:
    """The files below ``directory`` this process holds open (Linux: /proc/self/fd)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed since the listing (the listing's own descriptor, for one)
            continue
        if target.startswith(f"{directory}/"):
            found.append(target)
    return found


def test_flush_due(tmp_path: Path) -> None:
    manager = new_manager([tmp_path], flush_interval_messages=5, flush_interval_ms=1000, segment_bytes=600)
    a, b, c = (manager.get_or_create("t", p) for p in range(3))
    a.append(make_batch(make_values(5)), now_ms=0)
    b.append(make_batch(make_values(1)), now_ms=0)
    assert manager.flush_due(500) == [a]
    assert manager.flush_due(1000) == [a, b]
    for log in (a, b):
        log.flush()
    assert manager.flush_due(10**9) == []
    for _ in range(4):
        c.append(make_batch(make_values(1, 200)), now_ms=10**9)  # rolls at 600 bytes
    c.flush()
    c.append(make_batch(make_values(1, 200)), now_ms=10**9)
    c.append(make_batch(make_values(1, 200)), now_ms=10**9)
    assert c.has_unflushed_rolled_segments()
    assert manager.flush_due(10**9) == [c]
    manager.shutdown()


def test_checkpoint_per_directory(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = new_manager(dirs)
    for p in range(4):
        log = manager.get_or_create("t", p)
        log.append(make_batch(make_values(p + 1)))
        log.flush()
    manager.checkpoint_recovery_points()
    merged: dict[tuple[str, int], int] = {}
    for d in dirs:
        points = read_checkpoint(d / RECOVERY_POINT_CHECKPOINT)
        assert len(points) == 2
        merged |= points
    assert merged == {("t", p): p + 1 for p in range(4)}
    manager.shutdown()


def test_run_retention_and_delete_log(tmp_path: Path) -> None:
    manager = new_manager([tmp_path], retention_ms=1000, segment_bytes=500)
    log = manager.get_or_create("t", 0)
    for i in range(10):
        log.append(make_batch(make_values(2, 100), base_ts=i), now_ms=i)
    before = log.segment_count()
    assert before > 2
    assert manager.run_retention(10**6) == before  # all expired: rolled, then every old segment deleted
    assert log.log_start_offset == log.log_end_offset
    assert manager.delete_log("t", 0) is True
    assert manager.delete_log("t", 0) is False
    assert manager.get("t", 0) is None
    assert not (tmp_path / "t-0").exists()
    manager.shutdown()


def test_no_dirs_refused() -> None:
    with pytest.raises(StorageError):
        LogManager([], LogConfig())


def test_log_dir_lock_refuses_a_second_manager(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    first = new_manager([b])
    with pytest.raises(StorageError, match=f"log directory {b} is in use by another process"):
        new_manager([a, b])
    third = new_manager([a])  # the failed load released the lock it had taken on a
    third.shutdown()
    first.shutdown()
    new_manager([a, b]).shutdown()
