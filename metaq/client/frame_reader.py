"""Reading a broker's size-prefixed response frames off a socket: a reused read-ahead buffer for small frames
(several pipelined responses may arrive in one recv), an exact-size buffer for a large one. Used by
:class:`metaq.client.connection.BrokerConnection`.
"""

from __future__ import annotations

import struct
from typing import Any

from metaq.errors import ProtocolError

_SIZE = struct.Struct(">i")
_READ_CHUNK = 65536  # frames up to this size are decoded in place from the read-ahead buffer


class _WouldBlock(Exception):
    """The read deadline passed before a whole frame arrived; what was read so far is kept."""


class _PeerClosed(Exception):
    """recv returned 0 bytes."""


class _FrameReader:
    """Reads size-prefixed frames with few syscalls and no quadratic copies.

    Small frames are parsed in place from one reused read-ahead buffer (several pipelined responses may arrive
    in one recv); a frame larger than that buffer gets its own exact-size bytearray, filled with recv_into.
    A returned frame is only valid until the next call.
    """

    def __init__(self, recv_into: Any, max_frame: int, chunk: int = _READ_CHUNK) -> None:
        self._recv_into = recv_into  # (memoryview) -> bytes read; raises _WouldBlock / _PeerClosed
        self._max_frame = max_frame
        self._buf = bytearray(chunk)
        self._start = 0
        self._end = 0
        self._big: bytearray | None = None
        self._big_pos = 0

    def next_frame(self) -> memoryview:
        if self._big is not None:
            return self._fill_big()
        buf = self._buf
        while True:
            avail = self._end - self._start
            if avail >= 4:
                size = _SIZE.unpack_from(buf, self._start)[0]
                if size < 0 or size > self._max_frame:
                    raise ProtocolError(f"response frame size {size} is outside 0..{self._max_frame}")
                if avail >= 4 + size:
                    begin = self._start + 4
                    self._start = begin + size
                    return memoryview(buf)[begin : begin + size]
                if 4 + size > len(buf):
                    return self._start_big(size)
            self._compact()
            self._end += self._recv_into(memoryview(buf)[self._end :])

    def _compact(self) -> None:
        if self._start:
            kept = self._end - self._start
            self._buf[:kept] = self._buf[self._start : self._end]
            self._start, self._end = 0, kept

    def _start_big(self, size: int) -> memoryview:
        have = self._end - self._start - 4
        big = bytearray(size)
        big[:have] = self._buf[self._start + 4 : self._end]
        self._start = self._end = 0
        self._big, self._big_pos = big, have
        return self._fill_big()

    def _fill_big(self) -> memoryview:
        big = self._big
        assert big is not None
        view = memoryview(big)
        while self._big_pos < len(big):
            self._big_pos += self._recv_into(view[self._big_pos :])
        self._big = None
        return view
