"""Fetch v0..3: the stored v2 batches down-converted to the message format the request version implies
(magic 0 for Fetch v0..1, magic 1 for v2..3), lazily and in bounded memory, as Kafka does since KIP-283
(``LazyDownConversionRecords``/``LazyDownConversionRecordsSend``; docs/legacy-wire.md).

A partition's answer is a file slice of whole v2 batches. Its size must go into the response before its
bytes, so the first chunk of batches is converted when the answer is built and the size is fixed at the
larger of the slice's size and that chunk's (a client always gets at least one whole converted batch).
The rest is converted a chunk (about :data:`CHUNK_BYTES` of stored bytes) at a time while the response is
written, and stops at the fixed size: a message cut there is a partial message, which old clients ignore
and fetch again. If the converted bytes run out first, the rest is an "overflow" entry: offset -1 and a
size larger than what remains, which readers also take for a partial message.

Per batch: records below the fetch offset are left out, headers are dropped (v0/v1 have none), a compressed
batch becomes one compressed wrapper with the same codec (zstd has no v0/v1 form: a first batch in zstd
gets UNSUPPORTED_COMPRESSION_TYPE, a later one ends the answer with the overflow entry, as in Kafka),
magic 0 loses the timestamps, magic 1 keeps them (and LogAppendTime).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator

from metaq.broker.log.segment_reads import FetchSlice
from metaq.errors import UnsupportedCompressionError
from metaq.protocol import legacy
from metaq.protocol.batches import BATCH_HEADER_SIZE, LOG_OVERHEAD
from metaq.protocol.records import decode_records

__all__ = ["CHUNK_BYTES", "DownConverted", "fetch_magic"]

CHUNK_BYTES = 128 * 1024
"""Stored bytes converted at a time (Kafka's ``MAX_READ_SIZE``); a batch larger than this is read whole."""
_ZSTD = 4
_HEADER = struct.Struct(">qiibIhiqqqhii")
_OVERFLOW = struct.Struct(">qi")


def fetch_magic(version: int) -> int | None:
    """The message format a Fetch request version can read: 0 (v0..1), 1 (v2..3), None (v4+: as stored)."""
    if version <= 1:
        return 0
    if version <= 3:
        return 1
    return None


class DownConverted:
    """A partition's records for a Fetch v0..3 answer (module doc): a record source of fixed :attr:`size`
    whose bytes :meth:`pieces` makes while the answer is written.

    Raises UnsupportedCompressionError when the first batch cannot be converted (zstd)."""

    def __init__(self, piece: FetchSlice, magic: int, fetch_offset: int) -> None:
        self._slice = piece
        self._magic = magic
        self._fetch_offset = fetch_offset
        self._first, self._read = self._convert(0, first=True)
        self.size = max(piece.size, len(self._first)) if self._first else LOG_OVERHEAD

    def pieces(self) -> Iterator[bytes]:
        """The converted bytes, :attr:`size` of them in all, at most about a chunk held at a time."""
        remaining = self.size
        converted, position = self._first, self._read
        self._first = b""
        while remaining > 0:
            if not converted:
                yield _overflow(remaining)
                return
            out = converted[:remaining]
            remaining -= len(out)
            yield out
            if remaining <= 0 or position >= self._slice.size:
                converted = b""
                continue
            try:
                converted, position = self._convert(position, first=False)
            except UnsupportedCompressionError:
                converted = b""

    def _convert(self, start: int, *, first: bool) -> tuple[bytes, int]:
        """Convert the whole batches from ``start`` (bytes into the slice) for about CHUNK_BYTES: (their
        message set, the position after them). A batch cut off at the slice's end is left out."""
        chunk = self._read_batches(start)
        if not chunk:
            return b"", self._slice.size
        out: list[bytes] = []
        pos = 0
        while len(chunk) - pos >= BATCH_HEADER_SIZE:
            fields = _HEADER.unpack_from(chunk, pos)
            size = fields[1] + LOG_OVERHEAD
            if pos + size > len(chunk):
                break
            attributes = fields[5]
            if attributes & legacy.CODEC_MASK == _ZSTD:
                if first and not out:
                    raise UnsupportedCompressionError("a zstd batch cannot be down-converted to message format "
                                                      f"v{self._magic}")
                return b"".join(out), self._slice.size  # stop here: the overflow entry ends the answer
            out.append(self._convert_batch(chunk[pos:pos + size], attributes, fields[8]))
            pos += size
        return b"".join(out), start + pos

    def _read_batches(self, start: int) -> bytes:
        """About CHUNK_BYTES of the slice from ``start``, extended to end on a batch boundary when the
        first batch alone is larger."""
        want = min(CHUNK_BYTES, self._slice.size - start)
        if want <= 0:
            return b""
        data = self._read_at(start, want)
        if len(data) >= LOG_OVERHEAD:
            first_size = struct.unpack_from(">i", data, 8)[0] + LOG_OVERHEAD
            if first_size > len(data) and start + first_size <= self._slice.size:
                data = self._read_at(start, first_size)
        return data

    def _read_at(self, start: int, size: int) -> bytes:
        return os.pread(self._slice.file.fileno(), size, self._slice.position + start)

    def _convert_batch(self, batch: bytes, attributes: int, max_timestamp: int) -> bytes:
        """One v2 batch as a message set of ``self._magic``: plain messages, or one wrapper (module doc)."""
        records = decode_records(batch, self._fetch_offset).records
        if not records:
            return b""
        magic = self._magic
        rows = [(offset, timestamp if magic else legacy.NO_TIMESTAMP, key, value)
                for offset, timestamp, key, value, _headers in records]
        log_append_time = max_timestamp if magic and attributes & legacy.TIMESTAMP_TYPE_MASK else None
        return legacy.build_message_set(magic, attributes & legacy.CODEC_MASK, rows,
                                        log_append_time=log_append_time)


def _overflow(remaining: int) -> bytes:
    """``remaining`` bytes that read as the start of one entry too large for them (Kafka's overflow batch)."""
    head = _OVERFLOW.pack(-1, max(remaining + 1, BATCH_HEADER_SIZE))
    return (head + bytes(max(0, remaining - len(head))))[:remaining]
