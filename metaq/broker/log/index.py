"""Sparse per-segment indexes: ``.index`` (offset -> file position) and ``.timeindex`` (timestamp -> offset).

Entries live both in the file (appended, never preallocated, so the file length is always a whole number of
entries) and in memory (``array``), where lookups bisect without touching the disk. Neither file has a
checksum; a file that fails its sanity check is rebuilt from the ``.log`` by the segment.

Only the event-loop thread appends; a flush thread may ``fsync`` the descriptor concurrently, which is safe.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_right
from pathlib import Path

from metaq.broker.log.open_files import SegmentFile
from metaq.errors import StorageError

__all__ = ["OFFSET_ENTRY_SIZE", "TIME_ENTRY_SIZE", "OffsetIndex", "TimeIndex"]

OFFSET_ENTRY_SIZE = 8
TIME_ENTRY_SIZE = 12
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class _IndexFile:
    """The file half of an index: lazily opened descriptor, positional appends, truncation, fsync.

    The descriptor is a :class:`SegmentFile` its segment may drop at any time (metaq/broker/log/open_files.py):
    a user holds the object while it uses the descriptor, and the next use reopens it."""

    entry_size: int

    def __init__(self, path: Path, base_offset: int, max_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_bytes // self.entry_size
        self._file: SegmentFile | None = None
        self.on_open = _no_op
        """Called when the file is opened (the segment counts itself in the open-files cache)."""

    def __len__(self) -> int:
        raise NotImplementedError

    @property
    def is_full(self) -> bool:
        return len(self) >= self.max_entries

    @property
    def is_open(self) -> bool:
        return self._file is not None

    def handle(self) -> SegmentFile:
        """The descriptor, opened if needed; hold it while using it (a flush thread captures it to fsync)."""
        file = self._file
        if file is None:
            try:
                file = SegmentFile(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644), "r+")
            except OSError as e:
                raise StorageError(f"cannot open index {self.path}: {e.strerror}") from e
            self._file = file
            self.on_open()
        return file

    def create(self) -> None:
        """Create the file now, empty (whatever a stray file of that name held), so a fresh segment has its
        full set of files on disk."""
        self._truncate_file(0)

    def _write_entry(self, data: bytes, count: int) -> None:
        file = self.handle()
        try:
            written = os.pwrite(file.fileno(), data, count * self.entry_size)
        except OSError as e:
            raise StorageError(f"cannot write index {self.path}: {e.strerror}") from e
        if written != len(data):  # a full disk may cut a write short instead of failing it
            raise StorageError(f"cannot write index {self.path}: short write ({written} of {len(data)} bytes)")

    def truncate_to(self, count: int) -> None:
        """Keep only the first ``count`` entries, in the file and in memory (undoes the entries of an append
        that failed; the file is cut even if memory already agrees, to drop a partly written entry). Memory
        goes first: if the file cannot be cut, lookups still never use an entry of the failed append."""
        self._forget_from(count)
        self._truncate_file(count)

    def _forget_from(self, count: int) -> None:
        raise NotImplementedError

    def _truncate_file(self, count: int) -> None:
        file = self.handle()
        try:
            os.ftruncate(file.fileno(), count * self.entry_size)
        except OSError as e:
            raise StorageError(f"cannot truncate index {self.path}: {e.strerror}") from e

    def _read_file(self) -> bytes | None:
        """The whole file, or None if it does not exist."""
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StorageError(f"cannot read index {self.path}: {e.strerror}") from e

    def close_file(self) -> None:
        """Close the descriptor (reopened on demand). In-memory entries stay usable for lookups."""
        file, self._file = self._file, None
        if file is not None:
            file.close()

    def release_file(self) -> None:
        """Drop this index's reference to the descriptor: closed now unless a user (a flush) still holds it."""
        self._file = None

    def rename(self, new_path: Path) -> None:
        try:
            self.path.rename(new_path)
        except FileNotFoundError:
            pass
        self.path = new_path

    def delete(self) -> None:
        self.close_file()
        self.path.unlink(missing_ok=True)


class OffsetIndex(_IndexFile):
    """Maps offsets to ``.log`` positions: entries ``(relative offset, position)``, both increasing."""

    entry_size = OFFSET_ENTRY_SIZE

    def __init__(self, path: Path, base_offset: int, max_bytes: int) -> None:
        super().__init__(path, base_offset, max_bytes)
        self._relative = array("i")
        self._positions = array("i")

    def __len__(self) -> int:
        return len(self._relative)

    def load(self, log_size: int) -> str | None:
        """Read the file into memory; return why it is not sane ("missing" if there is no file), or None.
        Sane: whole entries, offsets and positions strictly increasing, positions inside the log."""
        data = self._read_file()
        self._relative = array("i")
        self._positions = array("i")
        if data is None:
            return "missing"
        if len(data) % OFFSET_ENTRY_SIZE:
            return f"length {len(data)} is not a multiple of {OFFSET_ENTRY_SIZE}"
        values = array("i")  # C int: 4 bytes on every platform CPython supports
        values.frombytes(data)
        if sys.byteorder == "little":
            values.byteswap()
        relative, positions = values[0::2], values[1::2]
        problem = _check_increasing(relative, "offset") or _check_increasing(positions, "position")
        if problem:
            return problem
        if relative and relative[0] < 0:
            return f"negative relative offset {relative[0]}"
        if positions and positions[0] < 0:
            return f"negative position {positions[0]}"
        if positions and positions[-1] >= log_size:
            return f"position {positions[-1]} is outside the log ({log_size} bytes)"
        self._relative, self._positions = relative, positions
        return None

    def append(self, offset: int, position: int) -> None:
        """Add ``offset -> position``; ignored if not beyond the last entry or the index is full."""
        relative = offset - self.base_offset
        if self.is_full or (self._relative and relative <= self._relative[-1]):
            return
        self._write_entry(_OFFSET_ENTRY.pack(relative, position), len(self._relative))
        self._relative.append(relative)
        self._positions.append(position)

    def _forget_from(self, count: int) -> None:
        del self._relative[count:]
        del self._positions[count:]

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the greatest entry <= ``offset``; ``(base_offset, 0)`` if none."""
        i = bisect_right(self._relative, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._relative[i], self._positions[i]

    @property
    def last_entry(self) -> tuple[int, int]:
        """The last ``(offset, position)``, or ``(base_offset, 0)`` for an empty index."""
        if not self._relative:
            return self.base_offset, 0
        return self.base_offset + self._relative[-1], self._positions[-1]

    def reset(self) -> None:
        """Drop every entry (file and memory): the segment is about to rebuild it."""
        self._truncate_file(0)
        self._relative = array("i")
        self._positions = array("i")


class TimeIndex(_IndexFile):
    """Maps timestamps to offsets: entries ``(max timestamp so far, relative offset carrying it)``,
    appended only when the timestamp increases, so both columns are monotonic."""

    entry_size = TIME_ENTRY_SIZE

    def __init__(self, path: Path, base_offset: int, max_bytes: int) -> None:
        super().__init__(path, base_offset, max_bytes)
        self._timestamps = array("q")
        self._relative = array("i")

    def __len__(self) -> int:
        return len(self._timestamps)

    def load(self) -> str | None:
        """Read the file into memory; return why it is not sane, or None."""
        data = self._read_file()
        self._timestamps = array("q")
        self._relative = array("i")
        if data is None:
            return "missing"
        if len(data) % TIME_ENTRY_SIZE:
            return f"length {len(data)} is not a multiple of {TIME_ENTRY_SIZE}"
        timestamps = array("q")
        relative = array("i")
        for timestamp, rel in _TIME_ENTRY.iter_unpack(data):
            timestamps.append(timestamp)
            relative.append(rel)
        problem = _check_increasing(timestamps, "timestamp") or _check_increasing(relative, "offset", strict=False)
        if problem:
            return problem
        if relative and relative[0] < 0:
            return f"negative relative offset {relative[0]}"
        self._timestamps, self._relative = timestamps, relative
        return None

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add ``timestamp -> offset`` if the timestamp beats the last entry's (and there is room)."""
        if timestamp < 0 or self.is_full or (self._timestamps and timestamp <= self._timestamps[-1]):
            return
        relative = offset - self.base_offset
        if self._relative and relative < self._relative[-1]:
            return
        self._write_entry(_TIME_ENTRY.pack(timestamp, relative), len(self._timestamps))
        self._timestamps.append(timestamp)
        self._relative.append(relative)

    def _forget_from(self, count: int) -> None:
        del self._timestamps[count:]
        del self._relative[count:]

    def lookup(self, timestamp: int) -> int:
        """Offset of the greatest entry with timestamp <= ``timestamp``; ``base_offset`` if none."""
        i = bisect_right(self._timestamps, timestamp) - 1
        if i < 0:
            return self.base_offset
        return self.base_offset + self._relative[i]

    @property
    def last_entry(self) -> tuple[int, int] | None:
        """The last ``(timestamp, offset)``, or None for an empty index."""
        if not self._timestamps:
            return None
        return self._timestamps[-1], self.base_offset + self._relative[-1]

    def reset(self) -> None:
        self._truncate_file(0)
        self._timestamps = array("q")
        self._relative = array("i")


def _no_op() -> None:
    pass


def _check_increasing(values: array[int], what: str, *, strict: bool = True) -> str | None:
    """None if ``values`` increase (strictly unless ``strict`` is False), else a description of the first
    violation."""
    for i in range(1, len(values)):
        previous, current = values[i - 1], values[i]
        if current < previous or (strict and current == previous):
            return f"entry {i}: {what} {current} does not follow {previous}"
    return None
