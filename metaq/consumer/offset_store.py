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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from kazoo.protocol.states import WatchedEvent

from metaq.errors import ZooKeeperUnavailableError
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

    def changed_behind(self, partitions: Iterable[TopicPartition],
                       watch: Callable[[WatchedEvent], None] | None = None) -> dict[TopicPartition, int | None]:
        """Owned partitions whose offset node someone else wrote since our fence or last commit (an operator's
        ``offsets reset --force``, or a newer owner), with the offset now there; they are forgotten (not
        committed again). ``watch`` is armed on each node read, so the next write wakes the caller again."""

    def close(self) -> None: ...


class ZooKeeperOffsetStore:
    """``auto_offset_reset`` is only named in the warning about an offset node that holds no offset."""

    def __init__(self, layout: ZkLayout, group: str, *, auto_offset_reset: str = "largest") -> None:
        self._layout = layout
        self._group = group
        self._auto_offset_reset = auto_offset_reset
        self._lock = threading.Lock()  # commits come from the committer and rebalance threads
        self._versions: dict[TopicPartition, int] = {}
        self._last: dict[TopicPartition, int | None] = {}
        # Commits whose reply was lost: partition -> (version written against, offsets tried against it).
        self._unconfirmed: dict[TopicPartition, tuple[int, set[int]]] = {}

    def take_ownership(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        fenced = self._layout.fence_offsets(self._group, list(partitions))
        with self._lock:
            for key, fence in fenced.items():
                if fence.malformed is not None:
                    log.warning("group %s: ignoring %s; %s-%d starts from auto.offset.reset=%s and the next commit "
                                "overwrites the node", self._group, fence.malformed, key[0], key[1],
                                self._auto_offset_reset)
                self._versions[key] = fence.version
                self._last[key] = fence.offset
                self._unconfirmed.pop(key, None)
        return {key: fence.offset for key, fence in fenced.items()}

    def commit(self, offsets: Mapping[TopicPartition, int]) -> CommitResult:
        with self._lock:
            self._confirm_unknown_outcomes()
            changed = {
                key: (offset, self._versions[key])
                for key, offset in offsets.items()
                if key in self._versions and offset >= 0 and self._last.get(key) != offset  # KAFKA-987
            }
            if not changed:
                return CommitResult()
            try:
                versions, lost = self._layout.commit_fenced_offsets(self._group, changed)
            except ZooKeeperUnavailableError:
                # The connection dropped with the transaction in flight: it may have been applied, and then
                # the node is one version past the one we hold. Remember what we tried, so that the next
                # commit tells our own write from a newer owner's fence (not "fenced" by ourselves).
                for key, (offset, version) in changed.items():
                    base, tried = self._unconfirmed.get(key, (version, set()))
                    self._unconfirmed[key] = (version, (tried | {offset}) if base == version else {offset})
                raise
            for key, version in versions.items():
                self._versions[key] = version
                self._last[key] = changed[key][0]
            for key in lost:
                self._versions.pop(key, None)
                self._last.pop(key, None)
                self._unconfirmed.pop(key, None)
                log.info("group %s: the offset node of %s-%d changed since our fence or last commit (a newer "
                         "owner's fence or an operator's reset); our offset is not committed", self._group, *key)
            return CommitResult(dict(versions), set(lost))

    def _confirm_unknown_outcomes(self) -> None:
        """Resolve commits whose reply was lost. If a partition's node is exactly one version past the one we
        wrote against and holds an offset we tried, our write was applied: adopt its version. Anything else
        (not applied, or fenced by a new owner since) keeps the old version, and a fence then shows as lost.
        Raises ZooKeeperUnavailableError while still disconnected (nothing can be committed then anyway)."""
        for key, (version, tried) in list(self._unconfirmed.items()):
            if self._versions.get(key) != version:
                del self._unconfirmed[key]
                continue
            node = self._layout.read_fenced_offset(self._group, *key)
            del self._unconfirmed[key]
            if node is not None and node.version == version + 1 and node.offset in tried:
                self._versions[key] = node.version
                self._last[key] = node.offset
                log.info("group %s: the commit of %s-%d at offset %d whose reply was lost had been applied",
                         self._group, key[0], key[1], node.offset)

    def release(self, partitions: Iterable[TopicPartition]) -> None:
        with self._lock:
            for key in partitions:
                self._versions.pop(key, None)
                self._last.pop(key, None)
                self._unconfirmed.pop(key, None)

    def owned(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._versions)

    def changed_behind(self, partitions: Iterable[TopicPartition],
                       watch: Callable[[WatchedEvent], None] | None = None) -> dict[TopicPartition, int | None]:
        """See :class:`OffsetStore`. Under the commit lock, so that our own commit (which also fires the watch)
        is never mistaken for someone else's: its new version is ours by the time we compare."""
        changed: dict[TopicPartition, int | None] = {}
        with self._lock:
            # Every node is read before anything is forgotten: a read that fails (the connection dropped)
            # raises with no partition half-handled, so the same check can simply be made again later.
            nodes = {key: self._layout.read_fenced_offset(self._group, *key, watch=watch)
                     for key in partitions if key in self._versions}
            for key, node in nodes.items():
                if key in self._unconfirmed or (node is not None and node.version == self._versions[key]):
                    continue  # ours (or a commit whose reply was lost: the next commit resolves it)
                changed[key] = None if node is None else node.offset
                self._versions.pop(key, None)
                self._last.pop(key, None)
        return changed

    def close(self) -> None:
        with self._lock:
            self._versions.clear()
            self._last.clear()
            self._unconfirmed.clear()
