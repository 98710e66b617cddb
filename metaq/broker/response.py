"""What a request handler answers: a response that writes itself to the client's connection.

The network layer frames, admits and dispatches; it hands every answer the connection's :class:`Outbound`
and awaits :meth:`Response.write`, never looking at what is sent. Most answers are one encoded Kafka message
(:class:`Encoded`); a Fetch answer writes file slices itself (metaq/broker/zero_copy.py), a Produce answer
packs its few fields itself (:class:`ProduceReply`); the SASL stage answers raw tokens (:class:`RawFrame`) and
closes the connection after a refusal (:class:`ClosingAfter`). See docs/architecture.md, "The request path".
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Protocol

from metaq.errors import MetaqError
from metaq.protocol.framing import SIZE
from metaq.protocol.messages import ApiRequest, ApiResponse
from metaq.protocol.produce_response import TopicAnswer, encode_produce_response

if TYPE_CHECKING:
    from metaq.broker.context import BrokerContext


@dataclass(frozen=True)
class Outbound:
    """Where one answer goes: the connection's writer, whether it is TLS (the kernel cannot send file bytes
    itself then), the request's correlation id, and whether the request named many entries (its answer is
    encoded in a worker thread, see metaq/broker/request_bounds.py)."""

    writer: asyncio.StreamWriter
    tls: bool
    correlation_id: int
    large: bool = False


class Response(Protocol):
    """An answer that knows how to write itself (and drain the writer) to a client."""

    async def write(self, out: Outbound) -> None: ...


@dataclass(frozen=True)
class Encoded:
    """One Kafka response message, encoded with the request's correlation id and framed."""

    message: ApiResponse

    async def write(self, out: Outbound) -> None:
        self.message.with_header(correlation_id=out.correlation_id)
        encode = partial(self.message.encode, header=True, framed=True)
        out.writer.write(await asyncio.to_thread(encode) if out.large else encode())
        await out.writer.drain()


class ProduceReply:
    """A Produce answer, encoded with struct packing (metaq/protocol/produce_response.py): every Produce request
    is answered, and kafka-python's response objects and generic encoder cost as much as a small append.
    ``throttle_time_ms`` is set by a client quota (metaq/broker/quota/request_path.py)."""

    __slots__ = ("version", "topics", "throttle_time_ms")

    def __init__(self, version: int, topics: list[TopicAnswer], throttle_time_ms: int = 0) -> None:
        self.version = version
        self.topics = topics
        self.throttle_time_ms = throttle_time_ms

    async def write(self, out: Outbound) -> None:
        encode = partial(encode_produce_response, self.version, out.correlation_id, self.topics,
                         self.throttle_time_ms)
        out.writer.write(await asyncio.to_thread(encode) if out.large else encode())
        await out.writer.drain()


@dataclass(frozen=True)
class RawFrame:
    """Bytes framed on their own, without a response header (a SASL token after SaslHandshake v0)."""

    payload: bytes

    async def write(self, out: Outbound) -> None:
        out.writer.write(SIZE.pack(len(self.payload)) + self.payload)
        await out.writer.drain()


@dataclass(frozen=True)
class ClosingAfter:
    """An answer after which the connection is closed: ``error`` is raised once ``response`` is written."""

    response: Response
    error: MetaqError

    async def write(self, out: Outbound) -> None:
        await self.response.write(out)
        raise self.error


Handler = Callable[["BrokerContext", ApiRequest, int], Awaitable[Response | None]]
"""A request handler: (context, decoded request, its version) -> response; None answers nothing (acks=0)."""

MessageHandler = Callable[["BrokerContext", ApiRequest, int], Awaitable[ApiResponse | None]]
"""A handler whose answer is one Kafka message (all but Fetch); :func:`encoded` makes it a :data:`Handler`."""


def encoded(handler: MessageHandler) -> Handler:
    """``handler``'s message answered as :class:`Encoded` (None stays None: nothing is sent)."""

    async def handle(ctx: BrokerContext, request: ApiRequest, version: int) -> Response | None:
        message = await handler(ctx, request, version)
        return None if message is None else Encoded(message)

    handle.__name__ = getattr(handler, "__name__", "handle")
    handle.__qualname__ = getattr(handler, "__qualname__", "handle")
    return handle
