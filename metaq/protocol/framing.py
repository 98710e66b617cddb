"""Kafka request framing: a 4-byte big-endian size, then a header whose first fields are fixed."""

from __future__ import annotations

import struct

from metaq.errors import ProtocolError

SIZE = struct.Struct(">i")
REQUEST_PREFIX = struct.Struct(">hhi")  # api_key, api_version, correlation_id
REQUEST_PREFIX_SIZE = REQUEST_PREFIX.size


def peek_request(frame: bytes | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a request frame, without decoding the rest."""
    if len(frame) < REQUEST_PREFIX_SIZE:
        raise ProtocolError(f"request frame of {len(frame)} bytes is shorter than a request header")
    return REQUEST_PREFIX.unpack_from(frame, 0)
