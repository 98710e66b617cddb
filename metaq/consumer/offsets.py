"""Where a group's offsets live, behind one interface, with fencing.

``offsets.storage=zookeeper`` keeps them at /consumers/<g>/offsets/<t>/<p> (through zk_layout). Every
commit is conditional: right after claiming a partition the new owner *fences* its offset node (bumps
its version); each commit is a version-checked write in one multi-op transaction. A member that lost a
partition, however it lost it (rebalance, expired session, a pause past the session timeout), still
holds an old version, so its commit fails and it learns it is no longer the owner. Offsets therefore
never move backwards because of a stale member.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from zk_layout import ZkLayout

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass
class CommitResult:
    committed: dict[TopicPartition, int] = field(default_factory=dict)
    lost: set[TopicPartition] = field(default_factory=set)


class OffsetStore(Protocol):
    def take_ownership(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """Fence the partitions just claimed; returns their committed offsets (None: no offset)."""

    def commit(self, offsets: Mapping[TopicPartition, int]) -> CommitResult:
        """Commit next-offsets of owned partitions; those whose fence was lost are reported, not written."""

    def release(self, partitions: Iterable[TopicPartition]) -> None:
        """Forget the commit right (ownership given up or lost)."""

    def owned(self) -> set[TopicPartition]: ...

    def close(self) -> None: ...


class ZooKeeperOffsetStore:
    def __init__(self, layout: ZkLayout, group: str) -> None:
        self._layout = layout
        self._group = group
        self._lock = threading.Lock()  # commits come from the committer and rebalance threads
        self._versions: dict[TopicPartition, int] = {}
        self._last: dict[TopicPartition, int | None] = {}

    def take_ownership(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        fenced = self._layout.fence_offsets(self._group, list(partitions))
        with self._lock:
            for key, fence in fenced.items():
                self._versions[key] = fence.version
                self._last[key] = fence.offset
        return {key: fence.offset for key, fence in fenced.items()}

    def commit(self, offsets: Mapping[TopicPartition, int]) -> CommitResult:
        with self._lock:
            changed = {
                key: (offset, self._versions[key])
                for key, offset in offsets.items()
                if key in self._versions and offset >= 0 and self._last.get(key) != offset  # KAFKA-987
            }
            if not changed:
                return CommitResult()
            versions, lost = self._layout.commit_fenced_offsets(self._group, changed)
            for key, version in versions.items():
                self._versions[key] = version
                self._last[key] = changed[key][0]
            for key in lost:
                self._versions.pop(key, None)
                self._last.pop(key, None)
                log.warning("group %s: %s-%d is fenced by a newer owner; its offset is not committed",
                            self._group, *key)
            return CommitResult(dict(versions), set(lost))

    def release(self, partitions: Iterable[TopicPartition]) -> None:
        with self._lock:
            for key in partitions:
                self._versions.pop(key, None)
                self._last.pop(key, None)

    def owned(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._versions)

    def close(self) -> None:
        with self._lock:
            self._versions.clear()
            self._last.clear()
