"""A Fetch answer whose records are still file slices, and how it is written without copying them.

The Fetch handler (metaq/broker/handlers/fetch.py) answers a :class:`FetchReply`; the network layer only
awaits its :meth:`FetchReply.write`. The answer goes out in pieces of about WRITE_BATCH_BYTES, each drained
to the socket before the next is read from disk, so a slow reader holds little memory; large slices go by
sendfile.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, cast

from metaq.broker.downconvert import DownConverted
from metaq.protocol.fetch_response import TopicPart, encode_fetch_response

if TYPE_CHECKING:
    from metaq.broker.log.segment_reads import FetchSlice
    from metaq.broker.response import Outbound

# Record slices smaller than this are read into the response buffer: one write() is cheaper than the
# extra system calls and event-loop round trip of sendfile for small pieces.
SENDFILE_MIN_BYTES = 32 * 1024
# Response bytes gathered in memory before they are handed to the socket (and drained).
WRITE_BATCH_BYTES = 64 * 1024


class FetchReply:
    """A Fetch response whose records are still file slices; it encodes and sends itself."""

    def __init__(self, version: int, topics: list[TopicPart], throttle_time_ms: int = 0) -> None:
        self.version = version
        self.topics = topics
        self.throttle_time_ms = throttle_time_ms  # a client quota's (metaq/broker/quota/request_path.py)

    async def write(self, out: Outbound) -> None:
        """Under TLS the kernel cannot send file bytes itself (they must be encrypted in this process), so
        every slice takes the batch path instead: preadv reads it from the page cache straight into the
        batch's one bytearray, and the TLS transport encrypts from that buffer; no per-record bytes
        object is made and no more than about WRITE_BATCH_BYTES of plaintext is held per connection."""
        loop = asyncio.get_running_loop()
        batch: list[bytes | FetchSlice] = []
        batch_bytes = 0
        for chunk in encode_fetch_response(self.version, out.correlation_id, self.topics,
                                           throttle_time_ms=self.throttle_time_ms):
            if isinstance(chunk, DownConverted):  # Fetch v0..3: converted a piece at a time, as it is sent
                for converted in chunk.pieces():
                    batch.append(converted)
                    batch_bytes += len(converted)
                    if batch_bytes >= WRITE_BATCH_BYTES:
                        await _write_batch(out, batch, batch_bytes)
                        batch, batch_bytes = [], 0
                continue
            piece = chunk if isinstance(chunk, bytes) else cast("FetchSlice", chunk)  # the log's record source
            size = len(piece) if isinstance(piece, bytes) else piece.size
            if not out.tls and not isinstance(piece, bytes) and size >= SENDFILE_MIN_BYTES:
                await _write_batch(out, batch, batch_bytes)
                batch, batch_bytes = [], 0
                sent = await loop.sendfile(out.writer.transport, piece.file, piece.position, size)
                if sent != size:  # the segment shrank under us: the frame is now wrong, so end it
                    raise ConnectionError(f"sendfile sent {sent} of {size} bytes")
                continue
            batch.append(piece)
            batch_bytes += size
            if batch_bytes >= WRITE_BATCH_BYTES:
                await _write_batch(out, batch, batch_bytes)
                batch, batch_bytes = [], 0
        await _write_batch(out, batch, batch_bytes)


async def _write_batch(out: Outbound, batch: list[bytes | FetchSlice], size: int) -> None:
    """Header bytes and small record slices gathered into one buffer; slices are read straight into
    it (one copy from the page cache, none after), then written and drained."""
    if not batch:
        return
    buffer = bytearray(size)
    with memoryview(buffer) as view:
        at = 0
        for chunk in batch:
            if isinstance(chunk, bytes):
                view[at:at + len(chunk)] = chunk
                at += len(chunk)
                continue
            got = os.preadv(chunk.file.fileno(), [view[at:at + chunk.size]], chunk.position)
            if got != chunk.size:  # the segment shrank under us: the frame is now wrong, so end it
                raise ConnectionError(f"read {got} of a {chunk.size}-byte record slice")
            at += got
    out.writer.write(buffer)
    await out.writer.drain()
