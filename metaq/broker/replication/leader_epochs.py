"""The leader epoch cache of one log (KIP-101): which leader epoch began at which offset, kept in the
log directory's ``leader-epoch-checkpoint``::

    0            <- format version
    2            <- number of entries
    0 0          <- epoch start offset
    3 4213

A leader records its epoch at its log end when it becomes leader and stamps the epoch into every batch it
appends (the batch header's ``partition_leader_epoch``, outside the CRC); a follower records the epochs of
the batches it copies. The cache answers OffsetForLeaderEpoch: the end offset of an epoch is the start of
the next epoch this log knows (its log end for the latest one). A follower of a new leader asks for the
end of its own latest epoch and truncates there: records written under an old leader that the new one
never had go, and nothing the ISR had is touched, which truncating to the high watermark cannot ensure.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from pathlib import Path
from typing import NamedTuple

from metaq.errors import StorageError
from metaq.fileio import atomic_write

log = logging.getLogger(__name__)

FILE_NAME = "leader-epoch-checkpoint"


class EpochEnd(NamedTuple):
    """An OffsetForLeaderEpoch answer: the largest epoch at or below the one asked, and where it ended."""

    epoch: int
    end_offset: int


UNDEFINED = EpochEnd(-1, -1)


class LeaderEpochCache:
    """Epoch -> start offset entries of one log, in increasing order of both."""

    def __init__(self, directory: Path, entries: list[tuple[int, int]] | None = None) -> None:
        self.path = directory / FILE_NAME
        self.entries: list[tuple[int, int]] = list(entries or [])

    @classmethod
    def load(cls, directory: Path) -> LeaderEpochCache:
        """The cache in ``directory`` (empty if there is none; a file that does not parse is logged and
        treated as empty: the follower then truncates to its high watermark, the safe fallback)."""
        cache = cls(directory)
        try:
            text = cache.path.read_text(encoding="ascii")
        except FileNotFoundError:
            return cache
        except OSError as e:
            raise StorageError(f"cannot read {cache.path}: {e.strerror}") from e
        try:
            lines = text.split("\n")
            count = int(lines[1])
            if int(lines[0]) != 0:
                raise ValueError(f"unknown version {lines[0]!r}")
            for line in lines[2:2 + count]:
                epoch, offset = line.split()
                cache.entries.append((int(epoch), int(offset)))
        except (ValueError, IndexError) as e:
            log.warning("ignoring %s: not a leader epoch checkpoint (%s)", cache.path, e)
            cache.entries = []
        return cache

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else -1

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` begins at ``start_offset`` (ignored unless newer than the latest epoch)."""
        if epoch < 0 or epoch <= self.latest_epoch:
            return False
        # an epoch that began where a later-recorded one did replaces it (no records were written under it)
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        self._save()
        return True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> EpochEnd:
        """(largest epoch <= ``epoch``, the offset where it ended) as OffsetForLeaderEpoch answers it;
        UNDEFINED (-1, -1) for an epoch older than every entry."""
        if not self.entries or epoch < self.entries[0][0]:
            return UNDEFINED
        if epoch >= self.latest_epoch:
            return EpochEnd(self.latest_epoch, log_end_offset)
        epochs = [e for e, _ in self.entries]
        i = bisect_right(epochs, epoch)  # entries[i] is the first epoch above the requested one
        return EpochEnd(self.entries[i - 1][0], self.entries[i][1])

    def truncate_from_end(self, end_offset: int) -> None:
        """After the log was cut at ``end_offset``: forget epochs that began at or after it."""
        kept = [(e, o) for e, o in self.entries if o < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._save()

    def _save(self) -> None:
        body = "".join(f"{e} {o}\n" for e, o in self.entries)
        try:
            atomic_write(self.path, f"0\n{len(self.entries)}\n{body}".encode("ascii"))
        except OSError as e:
            raise StorageError(f"cannot write {self.path}: {e.strerror}") from e
