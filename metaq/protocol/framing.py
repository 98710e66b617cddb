"""Kafka request framing: a 4-byte big-endian size, then a header whose first fields are fixed."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

from kafka.protocol.api_message import ApiMessage

from metaq.errors import ProtocolError
from metaq.protocol.messages import ApiRequest, RequestHeader

SIZE = struct.Struct(">i")
REQUEST_PREFIX = struct.Struct(">hhi")  # api_key, api_version, correlation_id
REQUEST_PREFIX_SIZE = REQUEST_PREFIX.size


class RequestPrefix(NamedTuple):
    """The fields every request header starts with."""

    api_key: int
    api_version: int
    correlation_id: int


def peek_request(frame: bytes | bytearray | memoryview) -> RequestPrefix:
    """The header prefix of a request frame, without decoding the rest."""
    if len(frame) < REQUEST_PREFIX_SIZE:
        raise ProtocolError(f"request frame of {len(frame)} bytes is shorter than a request header")
    return RequestPrefix(*REQUEST_PREFIX.unpack_from(frame, 0))


_HeaderDecoder = Callable[[memoryview, int], tuple[RequestHeader, int]]
_BodyDecoder = Callable[[memoryview, int], tuple[ApiMessage, int]]
_DECODERS: dict[tuple[type[ApiMessage], int], tuple[_HeaderDecoder, _BodyDecoder]] = {}
"""(request class, version) -> its header and body decoders: kafka-python caches the compiled functions, but
finding them took a dozen class-property lookups per request (docs/performance.md, "The broker's cost per
request")."""


def _decoders(request_cls: type[ApiMessage], version: int) -> tuple[_HeaderDecoder, _BodyDecoder]:
    flexible = request_cls.flexible_version_q(version)
    header_cls = request_cls.header_class
    header_version = header_cls._flexible_versions[0] if flexible else header_cls._valid_versions[0]
    decode_header = header_cls._struct.compiled_decode_from(
        header_version, compact=False, tagged=flexible, data_class=header_cls
    )
    decode_body = request_cls._struct.compiled_decode_from(
        version, compact=flexible, tagged=flexible, data_class=request_cls[None]
    )
    return decode_header, decode_body


def decode_request(request_cls: type[ApiMessage], frame: bytes | bytearray | memoryview, version: int) -> ApiRequest:
    """A request (header included) decoded from one frame body, failing on any field that runs past it.

    kafka-python's compiled decoders slice strings and bytes without a bounds check, so a length
    running past the frame's end would yield a silently short value (a truncated Metadata request named
    a topic after the garbage that followed). Decoding here tracks the position and refuses a frame it
    overruns. Bytes after the last field are tolerated, as Kafka's request parser tolerates them.
    """
    data = memoryview(frame)
    decoders = _DECODERS.get((request_cls, version))
    if decoders is None:
        decoders = _DECODERS[request_cls, version] = _decoders(request_cls, version)
    decode_header, decode_body = decoders
    header, pos = decode_header(data, 0)
    if pos > len(data):
        raise ProtocolError(f"request header runs {pos - len(data)} bytes past the {len(data)}-byte frame")
    message, pos = decode_body(data, pos)
    if pos > len(data):
        raise ProtocolError(f"a field runs {pos - len(data)} bytes past the end of the {len(data)}-byte frame")
    message._header = header
    request: ApiRequest = message
    return request
