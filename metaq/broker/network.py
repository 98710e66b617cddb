"""The broker's socket layer: framing, dispatch, and isolation of misbehaving clients.

Each connection is served by one task that handles its requests in order (as Kafka mutes a channel
while a request is in flight), so responses keep the request order; a long-polling fetch waits without
holding up other connections. A frame that is too large, does not decode, or names an unknown API or
version closes that connection only, with a log line naming the client; the broker keeps serving.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from metaq.broker.context import CLIENT_HOST
from metaq.broker.handlers.api_versions import unsupported_version_response
from metaq.broker.handlers.fetch import FetchReply
from metaq.errors import ProtocolError
from metaq.protocol.apis import BROKER_APIS, ApiKey, api_name
from metaq.protocol.fetch_response import encode_fetch_response
from metaq.protocol.framing import SIZE, peek_request

log = logging.getLogger(__name__)

# Record slices smaller than this are read into the response buffer: one write() is cheaper than the
# extra system calls and event-loop round trip of sendfile for small pieces.
SENDFILE_MIN_BYTES = 32 * 1024

Handler = Callable[[Any, Any, int], Awaitable[Any]]


class ClientConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.client_id: str | None = None

    def __str__(self) -> str:
        return f"{self.peer} (client.id={self.client_id!r})" if self.client_id else self.peer


class BrokerServer:
    def __init__(
        self,
        context: Any,
        handlers: dict[ApiKey, Handler],
        *,
        host: str,
        port: int,
        max_request_bytes: int,
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
    ) -> None:
        self._context = context
        self._handlers = handlers
        self._host = host
        self._port = port
        self._max_request_bytes = max_request_bytes
        self._send_buffer = send_buffer_bytes
        self._receive_buffer = receive_buffer_bytes
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def bind(self) -> None:
        """Bind the port (so that port 0 gets a real one) without accepting connections yet."""
        self._server = await asyncio.start_server(
            self._serve, self._host, self._port, reuse_address=True, limit=1 << 20, start_serving=False
        )

    async def start_serving(self) -> None:
        assert self._server is not None
        await self._server.start_serving()
        log.info("listening on %s:%d", self._host, self.port)

    async def close(self) -> None:
        """Stop accepting, then end every connection (bounded: cancelled tasks finish promptly)."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(self._connections, timeout=5)
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self._tune_socket(writer)
        conn = ClientConnection(reader, writer)
        CLIENT_HOST.set("/" + conn.peer.rpartition(":")[0])  # this task's context: the connection's requests
        try:
            while True:
                frame = await self._read_frame(conn)
                if frame is None:
                    return
                await self._handle_frame(conn, frame)
        except ProtocolError as e:
            log.warning("closing connection from %s: %s", conn, e)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass  # the client went away; nothing to answer
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("closing connection from %s after an unexpected error", conn)
        finally:
            self._connections.discard(task)
            writer.close()

    def _tune_socket(self, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is None:
            return
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._send_buffer > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._send_buffer)
        if self._receive_buffer > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._receive_buffer)

    async def _read_frame(self, conn: ClientConnection) -> bytes | None:
        try:
            head = await conn.reader.readexactly(4)
        except asyncio.IncompleteReadError as e:
            if e.partial:
                raise ProtocolError(f"connection closed inside a frame size ({len(e.partial)} of 4 bytes)") from e
            return None
        (size,) = SIZE.unpack(head)
        if size < 8 or size > self._max_request_bytes:
            raise ProtocolError(
                f"request frame size {size} is outside 8..{self._max_request_bytes} (socket.request.max.bytes)"
            )
        try:
            return await conn.reader.readexactly(size)
        except asyncio.IncompleteReadError as e:
            raise ProtocolError(f"connection closed after {len(e.partial)} of a {size}-byte frame") from e

    async def _handle_frame(self, conn: ClientConnection, frame: bytes) -> None:
        api_key, version, correlation_id = peek_request(frame)
        entry = BROKER_APIS.get(api_key)  # type: ignore[call-overload]
        if entry is None:
            raise ProtocolError(f"unknown API key {api_key} (correlation id {correlation_id})")
        request_cls, _, lo, hi = entry
        if not lo <= version <= hi:
            if api_key == ApiKey.API_VERSIONS:
                await self._send_response(conn, unsupported_version_response(), correlation_id)
                return
            raise ProtocolError(f"{api_name(api_key)} v{version} is not supported (broker serves v{lo}..v{hi})")
        try:
            request = request_cls.decode(frame, version=version, header=True)
        except Exception as e:
            raise ProtocolError(
                f"cannot decode {api_name(api_key)} v{version} request of {len(frame)} bytes: {e!r}"
            ) from e
        conn.client_id = request.header.client_id
        reply = await self._handlers[ApiKey(api_key)](self._context, request, version)
        if reply is None:
            return
        if isinstance(reply, FetchReply):
            await self._send_fetch(conn, reply, correlation_id)
        else:
            await self._send_response(conn, reply, correlation_id)

    async def _send_response(self, conn: ClientConnection, response: Any, correlation_id: int) -> None:
        response.with_header(correlation_id=correlation_id)
        conn.writer.write(response.encode(header=True, framed=True))
        await conn.writer.drain()

    async def _send_fetch(self, conn: ClientConnection, reply: FetchReply, correlation_id: int) -> None:
        loop = asyncio.get_running_loop()
        pending = bytearray()
        for chunk in encode_fetch_response(reply.version, correlation_id, reply.topics):
            if isinstance(chunk, bytes):
                pending += chunk
            elif chunk.size < SENDFILE_MIN_BYTES:
                pending += chunk.read_bytes()
            else:
                if pending:
                    conn.writer.write(bytes(pending))
                    pending.clear()
                sent = await loop.sendfile(conn.writer.transport, chunk.file, chunk.position, chunk.size)
                if sent != chunk.size:  # the segment shrank under us: the frame is now wrong, so end it
                    raise ConnectionError(f"sendfile sent {sent} of {chunk.size} bytes")
        if pending:
            conn.writer.write(bytes(pending))
        await conn.writer.drain()
