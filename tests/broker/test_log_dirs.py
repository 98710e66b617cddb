"""Several log directories (docs/log-dirs.md): placement, a failed directory, future logs and their swap."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

import pytest

from metaq.broker.log.config import LogConfig
from metaq.broker.log.dir_mover import LogDirMover
from metaq.broker.log.loader import parse_log_dir_name
from metaq.broker.log.log_dirs import (
    LogDirOfflineError,
    choose_log_dir,
    future_dir_name,
    is_dir_failure,
    parse_future_dir_name,
)
from metaq.broker.log.log_manager import LogManager
from metaq.broker.log.partition_log import PartitionLog
from metaq.errors import StorageError
from tests.broker import decode, make_batch, make_values


def new_manager(dirs: list[Path], **config: int) -> LogManager:
    manager = LogManager(dirs, LogConfig(**config))  # type: ignore[arg-type]
    manager.load()
    return manager


def test_choose_log_dir_takes_the_fewest_partitions_then_the_first_listed() -> None:
    a, b, c = Path("/a"), Path("/b"), Path("/c")
    assert choose_log_dir([a, b, c], {a: 2, b: 1, c: 1}) == b
    assert choose_log_dir([c, b, a], {}) == c
    assert choose_log_dir([a, c], {a: 5, b: 0, c: 4}) == c  # b is offline: not offered
    with pytest.raises(StorageError, match="no online log directory"):
        choose_log_dir([], {})


def test_only_hard_io_errors_fail_a_directory() -> None:
    def wrapped(code: int) -> StorageError:
        try:
            try:
                raise OSError(code, "x")
            except OSError as e:
                raise StorageError("cannot write") from e
        except StorageError as outer:
            return outer

    assert is_dir_failure(wrapped(errno.EIO)) and is_dir_failure(wrapped(errno.EROFS))
    assert not is_dir_failure(wrapped(errno.ENOSPC))  # a full disk keeps its partitions (docs/log-dirs.md)
    assert not is_dir_failure(wrapped(errno.EBADF)) and not is_dir_failure(StorageError("closed"))


def test_future_dir_names() -> None:
    name = future_dir_name("my-topic", 7)
    assert name.startswith("my-topic-7.") and name.endswith("-future")
    assert parse_future_dir_name(name) == ("my-topic", 7)
    assert parse_log_dir_name(name) is None  # never loaded as a current log
    assert parse_future_dir_name("my-topic-7") is None and parse_future_dir_name("t-x.abc-future") is None


def test_new_partitions_spread_over_dirs_counting_future_logs(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    manager = new_manager(dirs)
    manager.get_or_create("t", 0)  # a
    manager.create_future("t", 0, dirs[1])  # b now counts one
    manager.get_or_create("t", 1)
    assert manager.log_dir_of("t", 1) == dirs[2]
    manager.set_preferred_dir("t", 2, dirs[0])
    manager.get_or_create("t", 2)
    assert manager.log_dir_of("t", 2) == dirs[0]  # AlterReplicaLogDirs before the log existed
    manager.shutdown()


def test_failed_dir_takes_only_its_partitions_offline(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = new_manager(dirs)
    failed: list[Path] = []
    manager.on_dir_failure = failed.append
    for p in range(4):
        manager.get_or_create("t", p).append(make_batch(make_values(3)))
    in_a = sorted(p for p in range(4) if manager.log_dir_of("t", p) == dirs[0])
    assert in_a == [0, 2]

    assert not manager.handle_error("t", 0, StorageError("disk full"))
    assert manager.handle_error("t", 0, OSError(errno.EIO, "Input/output error"))
    assert failed == [dirs[0]]
    assert manager.offline_partitions() == [("t", 0), ("t", 2)] and manager.online_dirs() == [dirs[1]]
    assert manager.get("t", 0) is None
    with pytest.raises(LogDirOfflineError, match=f"{dirs[0]} failed"):
        manager.get_or_create("t", 2)
    assert manager.get("t", 1) is not None and manager.get("t", 1).log_end_offset == 3  # type: ignore[union-attr]
    manager.get_or_create("u", 0)
    assert manager.log_dir_of("u", 0) == dirs[1]  # new partitions avoid the failed directory
    manager.fail_dir(dirs[0], "again")
    assert failed == [dirs[0]]  # reported once
    described = {d.path: d for d in manager.describe(lambda log: log.log_end_offset)}
    assert not described[dirs[0]].online and described[dirs[0]].replicas == []
    assert {(r.topic, r.partition) for r in described[dirs[1]].replicas} == {("t", 1), ("t", 3), ("u", 0)}
    manager.shutdown()
    assert not (dirs[0] / ".kafka_cleanshutdown").exists() and (dirs[1] / ".kafka_cleanshutdown").exists()


def test_move_copies_then_follows_the_tail_then_swaps(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = new_manager(dirs, segment_bytes=2048)
    log = manager.get_or_create("t", 0)
    for i in range(20):
        log.append(make_batch(make_values(5, tag=f"b{i}-")))
    assert log.segment_count() >= 2
    old_directory = log.directory
    future = manager.create_future("t", 0, dirs[1])
    mover = LogDirMover(manager, chunk_bytes=1500)
    assert mover.step(("t", 0), future)  # a first chunk
    assert 0 < future.log_end_offset < log.log_end_offset
    described = {d.path: d for d in manager.describe(lambda plog: plog.log_end_offset)}
    [moving] = described[dirs[1]].replicas
    assert moving.is_future and moving.offset_lag == log.log_end_offset - future.log_end_offset
    log.append(make_batch(make_values(5, tag="late-")))  # produced while copying
    steps = 1
    while manager.future("t", 0) is not None:
        mover.step(("t", 0), future)
        steps += 1
        assert steps < 100
    moved = manager.get("t", 0)
    assert moved is not None and moved.directory == dirs[1] / "t-0" and manager.log_dir_of("t", 0) == dirs[1]
    assert not old_directory.exists() and mover.moved == 1
    values = _read_all(moved)
    assert len(values) == 105 and values[-1] == b"late-00000004".ljust(20, b".")
    assert moved.append(make_batch([b"after"])).base_offset == 105
    manager.shutdown()
    reloaded = new_manager(dirs)
    assert reloaded.log_dir_of("t", 0) == dirs[1] and reloaded.get("t", 0).log_end_offset == 106  # type: ignore[union-attr]
    reloaded.shutdown()


def _read_all(log: PartitionLog) -> list[bytes | None]:
    values: list[bytes | None] = []
    while (piece := log.read(len(values), 1 << 20)) is not None:  # one segment at a time
        values += [v for _, _, v in decode(piece.read_bytes())]
    return values


def test_leftover_future_logs_at_load(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = new_manager(dirs)
    manager.get_or_create("t", 0).append(make_batch(make_values(2)))
    manager.get_or_create("t", 1).append(make_batch(make_values(2)))
    manager.shutdown()
    unfinished = dirs[1] / future_dir_name("t", 0)  # the current t-0 is in a: given up
    unfinished.mkdir()
    promoted = dirs[0] / future_dir_name("t", 1)  # t-1 (in b) was retired before the rename: promoted
    (dirs[1] / "t-1").rename(promoted)
    reloaded = new_manager(dirs)
    assert not unfinished.exists() and reloaded.log_dir_of("t", 0) == dirs[0]
    assert reloaded.log_dir_of("t", 1) == dirs[0] and reloaded.get("t", 1).log_end_offset == 2  # type: ignore[union-attr]
    reloaded.shutdown()


class _Context:
    """What the log dir handlers use of a BrokerContext: the logs, an authorizer that allows, HWs."""

    def __init__(self, logs: LogManager) -> None:
        self.logs = logs

    def denied(self, *_: object) -> int:
        return 0

    def high_watermark(self, _topic: str, _partition: int, plog: PartitionLog) -> int:
        return plog.log_end_offset - 1


def test_alter_replica_log_dirs_answers_per_partition_as_kafka(tmp_path: Path) -> None:
    from kafka.protocol.admin import AlterReplicaLogDirsRequest, DescribeLogDirsRequest

    from metaq.broker.handlers.log_dirs import alter_replica_log_dirs, describe_log_dirs

    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    manager = new_manager(dirs)
    for p in range(3):
        manager.get_or_create("t", p).append(make_batch(make_values(2)))  # t-0 in a, t-1 in b, t-2 in c
    manager.fail_dir(dirs[2], "test")
    ctx = _Context(manager)
    Dir = AlterReplicaLogDirsRequest.AlterReplicaLogDir  # noqa: N806
    request = AlterReplicaLogDirsRequest[1](dirs=[
        Dir(path=str(dirs[1]), topics=[Dir.AlterReplicaLogDirTopic(name="t", partitions=[0, 1, 2, 9])]),
        Dir(path=str(dirs[2]), topics=[Dir.AlterReplicaLogDirTopic(name="u", partitions=[0])]),
        Dir(path=str(tmp_path / "x"), topics=[Dir.AlterReplicaLogDirTopic(name="u", partitions=[1])])])
    answer = asyncio.run(alter_replica_log_dirs(ctx, request, 1))  # type: ignore[arg-type]
    codes = {(t.topic_name, p.partition_index): p.error_code for t in answer.results for p in t.partitions}
    assert codes == {("t", 0): 0, ("t", 1): 0,  # a move started; already there
                     ("t", 2): 56, ("u", 0): 56,  # offline replica; offline directory: KAFKA_STORAGE_ERROR
                     ("t", 9): 9,  # no replica here yet: REPLICA_NOT_AVAILABLE (and remembered)
                     ("u", 1): 57}  # not a log dir: LOG_DIR_NOT_FOUND
    assert manager.future("t", 0) is not None and manager.future("t", 1) is None

    described = asyncio.run(describe_log_dirs(ctx, DescribeLogDirsRequest[4](topics=None), 4))  # type: ignore[arg-type]
    by_dir = {r.log_dir: r for r in described.results}
    assert by_dir[str(dirs[2])].error_code == 56 and by_dir[str(dirs[2])].topics == []
    [topic] = by_dir[str(dirs[1])].topics
    found = {(p.partition_index, p.is_future_key, p.offset_lag) for p in topic.partitions}
    assert found == {(1, False, 1), (0, True, 2)}  # current: end - HW; future: behind the current log
    assert by_dir[str(dirs[0])].total_bytes > 0 and by_dir[str(dirs[0])].usable_bytes > 0
    manager.shutdown()


def test_a_directory_failing_at_start_up_is_offline_and_its_possible_partitions_too(tmp_path: Path) -> None:
    """A directory that cannot be created (here a file is in its place) is offline and the others load
    (Kafka's createAndValidateLogDirs); the partitions assigned here without a log in an online directory may
    be in it: offline, never created empty; a partition assigned later is created; with no directory left the
    start fails."""
    good, bad = tmp_path / "good", tmp_path / "bad"
    first = new_manager([good])
    first.get_or_create("t", 0).append(make_batch(make_values(3)))
    first.shutdown()
    bad.write_bytes(b"not a directory")
    manager = new_manager([bad, good])
    assert manager.online_dirs() == [good] and manager.offline_dirs() == [bad]
    assert manager.get("t", 0) is not None and manager.get("t", 0).log_end_offset == 3  # type: ignore[union-attr]
    assert manager.claim_assigned([("t", 0), ("t", 1)]) == [("t", 1)]
    assert manager.offline_partitions() == [("t", 1)]
    with pytest.raises(LogDirOfflineError):
        manager.get_or_create("t", 1)
    assert manager.get_or_create("u", 0).directory.parent == good  # assigned after the start: new
    manager.shutdown()
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(StorageError, match="none of the log directories"):
        new_manager([bad, tmp_path / "file" / "under-a-file"])
