"""Reading a partition log (:class:`~metaq.broker.log.partition_log.PartitionLog`) on the event loop: the fetch slice
at an offset (from the segment holding it, whole batches) and ListOffsets' lookups by timestamp.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from bisect import bisect_right

from metaq.broker.log.segment import LogSegment
from metaq.broker.log.segment_reads import FetchSlice, TimestampOffset
from metaq.errors import OffsetOutOfRangeError, StorageError

logger = logging.getLogger(__name__)


class LogReads:
    """Fetch reads and timestamp lookups across the segments, for :class:`PartitionLog`."""

    _segments: list[LogSegment]
    log_start_offset: int
    log_end_offset: int
    topic: str
    partition: int
    _bases: list[int]

    @abstractmethod
    def _check_open(self) -> None: ...

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> FetchSlice | None:
        """Bytes to answer a fetch at ``offset``: whole batches from the one holding ``offset``, at most
        ``max_bytes`` (the last batch may be cut; a first batch larger than ``max_bytes`` is returned whole),
        all from one segment. None at the log end (or at ``max_offset``, a consumer's high watermark, past
        which nothing is returned); OffsetOutOfRangeError outside the log."""
        self._check_open()
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.topic}-{self.partition}"
                f" (log start {self.log_start_offset}, log end {self.log_end_offset})"
            )
        if offset == self.log_end_offset or (max_offset is not None and offset >= max_offset):
            return None
        segments = self._segments
        try:
            for i in range(max(0, bisect_right(self._bases, offset) - 1), len(segments)):
                found = segments[i].read(offset, max_bytes, max_offset)
                if found is not None:
                    return found
        except OSError as e:
            raise StorageError(f"cannot read {self.topic}-{self.partition} at offset {offset}: {e}") from e
        return None

    def offset_for_timestamp(self, timestamp_ms: int) -> TimestampOffset | None:
        """The offset and timestamp of the first record whose timestamp is >= ``timestamp_ms``, or None.

        The special ListOffsets values -1 (latest) and -2 (earliest) are the caller's business."""
        self._check_open()
        try:
            for segment in list(self._segments):
                if segment.max_timestamp >= timestamp_ms:
                    found = segment.find_offset_for_timestamp(timestamp_ms)
                    if found is not None:
                        # not below DeleteRecords' start
                        return TimestampOffset(max(found.offset, self.log_start_offset), found.timestamp)
        except OSError as e:
            raise StorageError(f"cannot search {self.topic}-{self.partition} by timestamp: {e}") from e
        return None

    def max_timestamp_offset(self) -> TimestampOffset | None:
        """The offset and timestamp of the first record with the largest timestamp in the log (ListOffsets
        ``-3``, KIP-734), or None for an empty log: the exact record, even inside a compressed batch."""
        self._check_open()
        largest = max((segment.max_timestamp for segment in list(self._segments)), default=-1)
        return None if largest < 0 else self.offset_for_timestamp(largest)
