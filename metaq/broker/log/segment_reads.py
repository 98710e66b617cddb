"""Reading one log segment (:class:`~metaq.broker.log.segment.LogSegment`): walking batch headers from an offset
index entry, the byte range of whole batches a fetch returns (:class:`FetchSlice`, which a server may hand to
``sendfile``), and the lookup of a record by timestamp (ListOffsets).
"""

from __future__ import annotations

import io
import logging
import os
from abc import abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from metaq.broker.log.index import OffsetIndex, TimeIndex
from metaq.broker.log.open_files import SegmentFile
from metaq.errors import CorruptRecordError, StorageError
from metaq.protocol.batches import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    read_header,
)
from metaq.protocol.records import decode_records

logger = logging.getLogger(__name__)


_HEADER_CHUNK = 16 << 10
"""Bytes read at a time when walking batch headers from an index entry (reads, timestamp lookups)."""


class TimestampOffset(NamedTuple):
    """A record found by timestamp (ListOffsets): its offset and its own timestamp."""

    offset: int
    timestamp: int


@dataclass(frozen=True)
class FetchSlice:
    """A byte range of one segment's ``.log`` holding whole batches (the last one may be cut short).

    ``file`` is shared by every slice of the segment; the slice's reference keeps it open (whatever the
    open-files cache does) until the slice is dropped. A server may hand it to ``loop.sendfile``. Use explicit
    offsets on it (``os.pread``/``os.sendfile``): other users may move its file position."""

    file: io.FileIO
    position: int
    size: int
    first_offset: int
    """Base offset of the first batch in the slice (may be below the offset asked for)."""

    def read_bytes(self) -> bytes:
        """The slice's bytes, read without touching the shared file position."""
        return os.pread(self.file.fileno(), self.size, self.position)


class SegmentReads:
    """Batch headers, fetch slices and timestamp lookups of a segment, for :class:`LogSegment`."""

    log_path: Path
    size: int
    index: OffsetIndex
    next_offset: int
    max_timestamp: int
    time_index: TimeIndex

    @property
    @abstractmethod
    def file(self) -> SegmentFile: ...

    @abstractmethod
    def _mtime_ms(self) -> int: ...

    def _iter_headers(self, position: int, end: int) -> Iterator[tuple[int, BatchHeader]]:
        """Walk the (already validated) batch headers from ``position`` up to ``end``, reading in chunks."""
        file = self.file  # held for the whole walk: an eviction meanwhile must not close it under us
        fd = file.fileno()
        buf = b""
        buf_start = position
        while position < end:
            offset_in_buf = position - buf_start
            if offset_in_buf + BATCH_HEADER_SIZE > len(buf):
                buf = os.pread(fd, min(_HEADER_CHUNK, end - position), position)
                buf_start, offset_in_buf = position, 0
            try:
                header = read_header(buf, offset_in_buf)
            except CorruptRecordError as e:
                raise StorageError(f"{self.log_path}: corrupt batch header at byte {position}: {e}") from e
            if position + header.size > end:
                raise StorageError(f"{self.log_path}: batch at byte {position} runs past the segment end {end}")
            yield position, header
            position += header.size

    def batch_positions(self) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of every batch up to the segment's size (the log cleaner reads these)."""
        return self._iter_headers(0, self.size)

    def headers_from(self, offset: int) -> Iterator[BatchHeader]:
        """The headers of the batches from the one holding ``offset`` to the segment's end (producer state
        replay reads these 61-byte headers only, never the records)."""
        end = self.size
        found = self._find_batch(offset, end)
        if found is not None:
            for _, header in self._iter_headers(found[0], end):
                yield header

    def _find_batch(self, offset: int, end: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``."""
        _, start = self.index.lookup(offset)
        for position, header in self._iter_headers(start, end):
            if header.last_offset >= offset:
                return position, header
        return None

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> FetchSlice | None:
        """A slice starting at the batch holding ``offset``, at most ``max_bytes`` long (but always the whole
        first batch, KIP-74), or None if the segment has nothing at or after ``offset``. With ``max_offset``
        (a consumer's high watermark) the slice ends before the batch holding that offset."""
        end = self.size
        if max_offset is not None and max_offset < self.next_offset:
            bound = self._find_batch(max_offset, end)
            if bound is not None:
                end = bound[0]
        if offset >= self.next_offset or end == 0:
            return None
        found = self._find_batch(offset, end)
        if found is None or found[0] >= end:
            return None
        position, header = found
        size = min(max(max_bytes, header.size), end - position)
        return FetchSlice(self.file, position, size, header.base_offset)

    def find_offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """The offset and timestamp of the first record with timestamp >= ``timestamp`` in this segment."""
        if self.max_timestamp < timestamp:
            return None
        end = self.size
        _, start = self.index.lookup(self.time_index.lookup(timestamp))
        for position, header in self._iter_headers(start, end):
            if header.max_timestamp >= timestamp:
                found = self._first_record_at_or_after(position, header, timestamp)
                if found is not None:
                    return found
        return None

    def _first_record_at_or_after(self, position: int, header: BatchHeader,
                                  timestamp: int) -> TimestampOffset | None:
        """Decode this one batch (decompressed if it is) to find the exact record, not the batch's first."""
        file = self.file
        data = os.pread(file.fileno(), header.size, position)
        try:
            records = decode_records(data).records
        except CorruptRecordError as e:
            # Stored batches were validated on append; only damage on disk gets here. The batch start is a
            # safe, slightly early answer.
            logger.warning(
                "Cannot decode batch at byte %d of %s (%s); answering its base offset",
                position,
                self.log_path,
                e,
            )
            return TimestampOffset(header.base_offset, header.max_timestamp)
        for offset, record_ts, *_ in records:
            if record_ts >= timestamp:
                return TimestampOffset(offset, record_ts)
        return None

    def largest_timestamp(self) -> int:
        """Largest record timestamp, or the file's mtime if the segment has none (Kafka's retention rule)."""
        return self.max_timestamp if self.max_timestamp >= 0 else self._mtime_ms()
