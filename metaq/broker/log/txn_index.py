"""The aborted-transaction index of one partition: ``<segment base>.txnindex`` files, as Kafka's
``TransactionIndex`` (docs/transactions.md, "The log").

Each entry says that producer ``producer_id``'s transaction spanning ``first_offset..last_offset`` (the abort
marker's offset) was aborted, and what the last stable offset was when the marker was written. A
read_committed Fetch answers the entries overlapping the offsets it returns (``aborted_transactions``), so the
client can drop those records. An entry goes into the file of the segment that holds its abort marker
(a segment the log cleaner rewrites gets the entries of the markers it keeps, docs/compaction.md);
a segment deleted by retention takes its file with it (the file is removed when its segment no longer exists
at the next open, and the entries are dropped from memory once wholly below the log start).

Entry format (Kafka's ``AbortedTxn``, 34 bytes): int16 version 0, int64 producer id, int64 first offset,
int64 last offset, int64 last stable offset.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from metaq.errors import StorageError

__all__ = ["TXN_INDEX_SUFFIX", "AbortedTxn", "TxnIndex", "write_entries"]

logger = logging.getLogger(__name__)

TXN_INDEX_SUFFIX = ".txnindex"
_FILE = re.compile(r"^(\d{20})\.txnindex$")
_ENTRY = struct.Struct(">hqqqq")
_VERSION = 0


@dataclass(frozen=True, order=True)
class AbortedTxn:
    """One aborted transaction of a partition (ordered by its first offset)."""

    first_offset: int
    producer_id: int
    last_offset: int
    last_stable_offset: int


class TxnIndex:
    """Every ``.txnindex`` file of a partition directory, and their entries in memory (few: aborts only)."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        self.name = name
        self.entries: list[AbortedTxn] = []
        self._keys: set[tuple[int, int]] = set()  # (producer id, first offset): an abort is indexed once

    def load(self, segment_bases: Iterable[int], log_start: int) -> None:
        """Read the files of existing segments (a file without its segment is removed; a torn last entry
        is ignored: the replay of the log tail indexes that abort again)."""
        bases = set(segment_bases)
        self.entries, self._keys = [], set()
        try:
            names = sorted(entry.name for entry in os.scandir(self.directory))
        except FileNotFoundError:
            return
        for name in names:
            match = _FILE.match(name)
            if match is None:
                continue
            path = self.directory / name
            if int(match.group(1)) not in bases:
                path.unlink(missing_ok=True)
                continue
            for entry in self._read(path):
                if entry.last_offset >= log_start:
                    self._add(entry)
        self.entries.sort()

    def _read(self, path: Path) -> list[AbortedTxn]:
        data = path.read_bytes()
        entries = []
        for pos in range(0, len(data) - _ENTRY.size + 1, _ENTRY.size):
            version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
            if version != _VERSION:
                logger.warning("%s: ignoring the rest of %s: entry version %d", self.name, path, version)
                break
            entries.append(AbortedTxn(first, pid, last, lso))
        return entries

    def segments_replaced(self, base: int, end: int, old_bases: Iterable[int]) -> None:
        """The log cleaner swapped the segment ``base`` in for the segments ``old_bases`` (offsets ``base..end-1``):
        the aborts whose marker lies there are now those of its file; the other old segments' files go."""
        path = self.directory / f"{base:020d}{TXN_INDEX_SUFFIX}"
        try:
            cleaned = self._read(path) if path.exists() else []
        except OSError as e:
            raise StorageError(f"cannot read the transaction index {path}: {e}") from e
        self.entries = [e for e in self.entries if not base <= e.last_offset < end]
        self._keys = {(e.producer_id, e.first_offset) for e in self.entries}
        for entry in cleaned:
            self._add(entry)
        self.entries.sort()
        for old in old_bases:
            if old != base:
                (self.directory / f"{old:020d}{TXN_INDEX_SUFFIX}").unlink(missing_ok=True)

    def _add(self, entry: AbortedTxn) -> bool:
        key = (entry.producer_id, entry.first_offset)
        if key in self._keys:
            return False
        self._keys.add(key)
        self.entries.append(entry)
        return True

    def append(self, segment_base: int, entry: AbortedTxn) -> None:
        """Index an abort whose marker is in the segment at ``segment_base`` (once: replaying an already indexed
        marker changes nothing)."""
        if not self._add(entry):
            return
        self.entries.sort()
        path = self.directory / f"{segment_base:020d}{TXN_INDEX_SUFFIX}"
        try:
            with open(path, "ab") as f:
                f.write(_ENTRY.pack(_VERSION, entry.producer_id, entry.first_offset, entry.last_offset,
                                    entry.last_stable_offset))
                f.flush()
                os.fsync(f.fileno())  # aborts are rare; an acknowledged abort's entry must survive a crash
        except OSError as e:
            raise StorageError(f"cannot write the transaction index {path}: {e}") from e

    def overlapping(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions with records in ``start..end-1`` (Kafka's collectAbortedTxns)."""
        stop = bisect_left(self.entries, AbortedTxn(end, -1, -1, -1))
        return [e for e in self.entries[:stop] if e.last_offset >= start]

    def truncate_to(self, offset: int) -> None:
        """Forget aborts whose marker is at or after ``offset`` (the log was cut there); files are rewritten."""
        kept = [e for e in self.entries if e.last_offset < offset]
        if len(kept) == len(self.entries):
            return
        self.entries = kept
        self._keys = {(e.producer_id, e.first_offset) for e in kept}
        for entry in os.scandir(self.directory):
            match = _FILE.match(entry.name)
            if match is None:
                continue
            path = Path(entry.path)
            data = path.read_bytes()
            keep = b"".join(data[pos:pos + _ENTRY.size] for pos in range(0, len(data) - _ENTRY.size + 1, _ENTRY.size)
                            if _ENTRY.unpack_from(data, pos)[3] < offset)
            path.write_bytes(keep)

    def remove_below(self, log_start: int, segment_bases: Iterable[int]) -> None:
        """After retention: drop entries wholly below the log start and files of deleted segments."""
        self.entries = [e for e in self.entries if e.last_offset >= log_start]
        self._keys = {(e.producer_id, e.first_offset) for e in self.entries}
        bases = set(segment_bases)
        for entry in os.scandir(self.directory):
            match = _FILE.match(entry.name)
            if match is not None and int(match.group(1)) not in bases:
                Path(entry.path).unlink(missing_ok=True)


def write_entries(path: Path, entries: Iterable[AbortedTxn]) -> None:
    """A ``.txnindex`` file holding ``entries`` (the log cleaner's cleaned copy; the caller fsyncs it)."""
    path.write_bytes(b"".join(_ENTRY.pack(_VERSION, e.producer_id, e.first_offset, e.last_offset,
                                          e.last_stable_offset) for e in entries))
