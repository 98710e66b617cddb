"""Pure rules of a broker's several log directories (JBOD, docs/log-dirs.md): where a new partition goes,
which I/O errors take a whole directory offline, how a future replica's and a deleted partition's directories are
named, and the values DescribeLogDirs reports.

    choose_log_dir([Path("/d1"), Path("/d2")], {Path("/d1"): 3, Path("/d2"): 1})   # Path("/d2")
    is_dir_failure(OSError(errno.EROFS, "Read-only file system"))                   # True
"""

from __future__ import annotations

import errno
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from metaq.errors import StorageError

__all__ = ["FUTURE_DIR_SUFFIX", "HARD_ERRNOS", "LogDirDescription", "LogDirOfflineError", "ReplicaDescription",
           "choose_log_dir", "future_dir_name", "is_dir_failure", "parse_future_dir_name", "volume_bytes"]

FUTURE_DIR_SUFFIX = "-future"

HARD_ERRNOS = frozenset({errno.EIO, errno.EROFS, errno.ENXIO, errno.ENODEV, errno.ESTALE, errno.EUCLEAN})
"""Errors that say the device or file system is broken, not that a request or the space was wrong: they take
the whole directory offline. ENOSPC and EDQUOT are deliberately left out: a full disk keeps its partitions
online and readable, the append fails with KAFKA_STORAGE_ERROR and succeeds again once space is freed
(integration_tests/test_broker_full_disk.py). Kafka marks a directory offline on any IOException, a full
disk included; docs/log-dirs.md says why metaq differs."""


class LogDirOfflineError(StorageError):
    """The partition's log is in a log directory that failed: it stays offline on this broker until the
    broker restarts with the directory repaired (Kafka's KafkaStorageException for an offline replica)."""


def is_dir_failure(error: BaseException) -> bool:
    """Whether ``error`` (or an error it was raised from) is an OSError of :data:`HARD_ERRNOS`."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in HARD_ERRNOS:
            return True
        current = current.__cause__ or current.__context__
    return False


def choose_log_dir(online: Sequence[Path], counts: Mapping[Path, int]) -> Path:
    """The directory for a new partition: the online one holding the fewest partitions (future replicas
    included), the first in ``log.dirs`` order on a tie, as Kafka's ``LogManager.nextLogDirs``. Not by free
    space: a new partition is empty, so free space says nothing about where its data will grow, and counting
    spreads partitions (and so write load) evenly and predictably (docs/log-dirs.md)."""
    if not online:
        raise StorageError("no online log directory: every log directory of this broker has failed")
    return min(online, key=lambda d: (counts.get(d, 0), online.index(d)))


def future_dir_name(topic: str, partition: int) -> str:
    """``<topic>-<partition>.<uuid>-future``: a replica being moved to another directory by
    AlterReplicaLogDirs, as Kafka's ``UnifiedLog.logFutureDirName`` names it."""
    return f"{topic}-{partition}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"


def parse_future_dir_name(name: str) -> tuple[str, int] | None:
    """``"t-0.<uuid>-future"`` -> ``("t", 0)``; None for any other name."""
    if not name.endswith(FUTURE_DIR_SUFFIX):
        return None
    stem, dot, unique = name[: -len(FUTURE_DIR_SUFFIX)].rpartition(".")
    if not dot or not unique:
        return None
    topic, sep, partition = stem.rpartition("-")
    if not sep or not topic or not partition.isdigit() or not partition.isascii():
        return None
    return topic, int(partition)


DELETE_DIR_SUFFIX = "-delete"
MAX_FILE_NAME = 255  # bytes of one path component on the file systems Kafka runs on (NAME_MAX)


def delete_dir_name(topic: str, partition: int) -> str:
    """The name a deleted partition's directory is renamed to before removal, as Kafka's
    ``LocalLog.logDirNameWithSuffixCappedLength`` makes it: ``<topic>-<partition>.<uuid>-delete``, the topic cut so
    the name keeps within 255 bytes (a legal 249-character topic would otherwise fail the rename)."""
    suffix = f"-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    return topic[:MAX_FILE_NAME - len(suffix)] + suffix


def volume_bytes(path: Path) -> tuple[int, int]:
    """(total, usable) bytes of the file system holding ``path`` (DescribeLogDirs v4); (-1, -1) if unknown."""
    try:
        stats = os.statvfs(path)
    except OSError:
        return -1, -1
    return stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize


@dataclass(frozen=True)
class ReplicaDescription:
    """One partition's log in a directory, as DescribeLogDirs reports it."""

    topic: str
    partition: int
    size: int
    offset_lag: int
    """The current log: how far its end is above the high watermark; a future log: how far it is behind the
    current one (Kafka's DescribeLogDirs semantics)."""
    is_future: bool


@dataclass(frozen=True)
class LogDirDescription:
    """One log directory: online or not, its replicas, and its volume's total and usable bytes."""

    path: Path
    online: bool
    replicas: list[ReplicaDescription] = field(default_factory=list)
    total_bytes: int = -1
    usable_bytes: int = -1
