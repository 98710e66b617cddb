"""The broker's socket layer: framing, dispatch, and isolation of misbehaving clients.

Each connection is served by one task that handles its requests in order (as Kafka mutes a channel
while a request is in flight), so responses keep the request order; a long-polling fetch waits without
holding up other connections. A frame that is too large, does not decode, or names an unknown API or
version closes that connection only, with a log line naming the client; the broker keeps serving.

Resources a client can hold are bounded (see :class:`ConnectionLimits`): connections in total and per
address, an idle connection's lifetime, the time to send a frame's body once its size is known, and the
bytes of request frames read but not yet handled. A frame is read into memory as it arrives (a client
that stalls pins only what it sent) and a response is written in bounded pieces, each handed to the
socket before the next is read from disk, and the next request is read only once the response is out.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from metaq.broker.auth.listeners import Listener
from metaq.broker.auth.sasl import (
    SASL_SERVER_MAX_RECEIVE_SIZE,
    SaslAuthenticationError,
    SaslAuthenticator,
    SaslExchange,
    authenticate_response,
    handshake_response,
)
from metaq.broker.auth.session import ANONYMOUS, SESSION, Session
from metaq.broker.auth.tls import certificate_principal
from metaq.broker.context import CLIENT_HOST, BrokerContext
from metaq.broker.downconvert import DownConverted
from metaq.broker.handlers.api_versions import unsupported_version_response
from metaq.broker.handlers.fetch import FetchReply
from metaq.broker.request_bounds import SLICE, check_entries
from metaq.errors import ConfigError, ProtocolError
from metaq.protocol.apis import BROKER_APIS, ApiKey, api_name
from metaq.protocol.fetch_response import encode_fetch_response
from metaq.protocol.framing import SIZE, decode_request, peek_request
from metaq.protocol.messages import ApiRequest, ApiResponse

log = logging.getLogger(__name__)

# Record slices smaller than this are read into the response buffer: one write() is cheaper than the
# extra system calls and event-loop round trip of sendfile for small pieces.
SENDFILE_MIN_BYTES = 32 * 1024
# Response bytes gathered in memory before they are handed to the socket (and drained).
WRITE_BATCH_BYTES = 64 * 1024
# Bytes a connection's reader may buffer ahead of the frame being read (asyncio pauses at twice this).
READ_BUFFER_LIMIT = 1 << 20
# At most one log line per this many seconds about connections refused for a limit.
REFUSAL_LOG_INTERVAL_S = 10.0

Handler = Callable[[BrokerContext, ApiRequest, int], Awaitable[ApiResponse | FetchReply | None]]
"""A request handler: (context, decoded request, its version) -> response; None answers nothing (acks=0)."""
SASL_APIS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


@dataclass(frozen=True)
class ConnectionLimits:
    """What one client may hold; Kafka's names and defaults (``request_body_timeout_ms`` is metaq's)."""

    max_request_bytes: int = 104857600  # socket.request.max.bytes
    request_body_timeout_ms: int = 30000  # socket.request.body.timeout.ms
    idle_timeout_ms: int = 600000  # connections.max.idle.ms
    max_connections: int = 2147483647  # max.connections
    max_connections_per_ip: int = 2147483647  # max.connections.per.ip
    queued_max_request_bytes: int = -1  # queued.max.request.bytes (-1: unbounded)
    max_request_entries: int = 20000  # metaq.max.request.entries (see metaq.broker.request_bounds)


OFF_LOOP_DECODE_BYTES = 64 * 1024
"""Frames at least this large are decoded in a worker thread: decoding a request that names a million
entries takes seconds of pure Python, which on the event loop would stall every other connection."""


class RequestMemoryPool:
    """Bytes of request frames read but not yet handled, over all connections (``queued.max.request.bytes``).

    As Kafka's pool, it is not strict: a frame is admitted while any capacity is left, so one frame
    larger than the pool still gets through on its own. A connection waiting here reads nothing more, so
    its client's bytes stay in the kernel (and TCP flow control slows it down)."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._used = 0
        self._freed = asyncio.Event()

    async def acquire(self, size: int) -> None:
        if self._capacity < 0:
            return
        while self._used >= self._capacity:
            self._freed.clear()
            await self._freed.wait()
        self._used += size

    def release(self, size: int) -> None:
        if self._capacity < 0:
            return
        self._used -= size
        self._freed.set()


@dataclass(frozen=True)
class ServedListener:
    """A listener and what serving it takes: a TLS context for SSL/SASL_SSL."""

    listener: Listener
    ssl_context: ssl.SSLContext | None = None
    sasl: SaslAuthenticator | None = None  # for SASL_PLAINTEXT and SASL_SSL


class ClientConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 served: ServedListener | None = None) -> None:
        self.reader = reader
        self.writer = writer
        self.served = served
        self.tls = served is not None and served.ssl_context is not None
        self.sasl: SaslExchange | None = None
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.host = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        self.client_id: str | None = None

    @property
    def listener_name(self) -> str:
        return self.served.listener.name if self.served is not None else "PLAINTEXT"

    def __str__(self) -> str:
        return f"{self.peer} (client.id={self.client_id!r})" if self.client_id else self.peer


class BrokerServer:
    def __init__(
        self,
        handlers: Mapping[ApiKey, Handler],
        *,
        listeners: list[ServedListener],
        limits: ConnectionLimits | None = None,
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
    ) -> None:
        self._context: Any = None
        self._handlers = handlers
        self._listeners = listeners
        self._limits = limits or ConnectionLimits()
        self._send_buffer = send_buffer_bytes
        self._receive_buffer = receive_buffer_bytes
        self._servers: dict[str, asyncio.Server] = {}
        self._connections: set[asyncio.Task[None]] = set()
        self._per_ip: Counter[str] = Counter()
        self._pool = RequestMemoryPool(self._limits.queued_max_request_bytes)
        self._refused = 0
        self._refusal_logged_at = float("-inf")

    @property
    def port(self) -> int:
        """The bound port of the first listener."""
        return self.ports[self._listeners[0].listener.name]

    @property
    def ports(self) -> dict[str, int]:
        """Listener name -> bound port (a listener configured with port 0 gets a free one)."""
        return {name: int(server.sockets[0].getsockname()[1]) for name, server in self._servers.items()}

    async def bind(self) -> None:
        """Bind every listener's port (so that port 0 gets a real one) without accepting connections yet."""
        for served in self._listeners:
            listener = served.listener
            try:
                self._servers[listener.name] = await asyncio.start_server(
                    partial(self._serve, served), listener.host or None, listener.port, reuse_address=True,
                    limit=READ_BUFFER_LIMIT, start_serving=False,
                )
            except OSError as e:  # in use, not a local address, or a name that does not resolve
                # asyncio rewords bind errors ("error while attempting to bind on address ..."): say it plainly
                plain = e.errno and e.errno > 0 and not isinstance(e, socket.gaierror)
                reason = os.strerror(e.errno) if plain else (e.strerror or str(e))
                await self.close()
                raise ConfigError(f"config 'listeners': cannot listen on {listener.name} {listener.host}:"
                                  f"{listener.port}: {reason}") from e

    async def start_serving(self, context: Any) -> None:
        """Accept connections; requests are handled with ``context`` (the broker's, once it is registered)."""
        self._context = context
        ports = self.ports
        for served in self._listeners:
            await self._servers[served.listener.name].start_serving()
            listener = served.listener
            log.info("listening on %s %s:%d (%s)", listener.name, listener.host or "*", ports[listener.name],
                     listener.protocol)

    async def close(self) -> None:
        """Stop accepting, then end every connection (bounded: cancelled tasks finish promptly)."""
        for server in self._servers.values():
            server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(self._connections, timeout=5)
        for server in self._servers.values():
            await server.wait_closed()

    async def _serve(self, served: ServedListener, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        conn = ClientConnection(reader, writer, served)
        if not self._admit(conn):
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self._context.metrics.connection_opened()
        CLIENT_HOST.set("/" + conn.host)  # this task's context: the connection's requests (DescribeGroups)
        try:
            self._tune_socket(writer)
            principal = await self._start_tls(conn) if conn.tls else None
            SESSION.set(Session(served.listener.name, principal or ANONYMOUS))
            if served.sasl is not None:
                conn.sasl = served.sasl.exchange()
            await self._serve_requests(conn)
        except SaslAuthenticationError as e:
            log.warning("Failed authentication with %s (%s)", conn, e)
            self._context.metrics.error("NONE", "SASL_AUTHENTICATION_FAILED")
        except ProtocolError as e:
            log.warning("closing connection from %s: %s", conn, e)
            self._context.metrics.error("NONE", "PROTOCOL")
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass  # the client went away; nothing to answer
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("closing connection from %s after an unexpected error", conn)
        finally:
            self._context.metrics.connection_closed()
            self._connections.discard(task)
            self._per_ip[conn.host] -= 1
            if self._per_ip[conn.host] <= 0:
                del self._per_ip[conn.host]
            writer.close()

    async def _start_tls(self, conn: ClientConnection) -> str | None:
        """The TLS handshake (after the connection limits let it in: a handshake costs CPU), bounded by
        socket.request.body.timeout.ms; a failed one is logged with the peer and ends the connection.
        Returns the principal of the client's certificate, if it sent one."""
        assert conn.served is not None and conn.served.ssl_context is not None
        try:
            await conn.writer.start_tls(conn.served.ssl_context,
                                        ssl_handshake_timeout=self._limits.request_body_timeout_ms / 1000.0)
        except (ssl.SSLError, ConnectionError, TimeoutError) as e:
            reason = getattr(e, "reason", None) or type(e).__name__
            log.warning("Failed authentication with %s (TLS handshake on listener %s: %s)", conn,
                     conn.served.listener.name, reason)
            raise ConnectionResetError from None
        return certificate_principal(conn.writer.get_extra_info("ssl_object"))

    def _admit(self, conn: ClientConnection) -> bool:
        """Count the connection in, or refuse it (closed at once) over max.connections[.per.ip]."""
        limits = self._limits
        if len(self._connections) >= limits.max_connections:
            self._refuse(conn, f"{len(self._connections)} connections open (max.connections {limits.max_connections})")
            return False
        if self._per_ip[conn.host] >= limits.max_connections_per_ip:
            self._refuse(conn, f"{self._per_ip[conn.host]} connections open from {conn.host}"
                               f" (max.connections.per.ip {limits.max_connections_per_ip})")
            return False
        self._per_ip[conn.host] += 1
        return True

    def _refuse(self, conn: ClientConnection, reason: str) -> None:
        self._refused += 1
        now = time.monotonic()
        if now - self._refusal_logged_at >= REFUSAL_LOG_INTERVAL_S:
            log.warning("refused connection from %s: %s (%d refused since the last such line)",
                        conn, reason, self._refused)
            self._refused = 0
            self._refusal_logged_at = now

    async def _serve_requests(self, conn: ClientConnection) -> None:
        while True:
            frame = await self._read_frame(conn)
            if frame is None:
                return
            size = len(frame)
            try:
                if conn.sasl is not None and conn.sasl.raw_tokens:  # after SaslHandshake v0
                    await self._raw_sasl_token(conn, bytes(frame))
                    continue
                if size >= OFF_LOOP_DECODE_BYTES:
                    request = await asyncio.to_thread(self._decode, frame)
                else:
                    request = self._decode(frame)
                del frame  # a large produce is held once (decoded), not twice, while it is handled
                await self._handle(conn, request)
            finally:
                self._pool.release(size)

    def _tune_socket(self, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is None:
            return
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._send_buffer > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._send_buffer)
        if self._receive_buffer > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._receive_buffer)

    async def _read_frame(self, conn: ClientConnection) -> bytes | bytearray | None:
        """The next frame's body, or None when the client closed (or idled out) between frames.

        On return the frame's bytes are counted in the request memory pool; the caller releases them."""
        limits = self._limits
        try:
            async with asyncio.timeout(limits.idle_timeout_ms / 1000.0):
                head = await conn.reader.readexactly(4)
        except TimeoutError:
            log.debug("closing connection from %s: idle for %d ms (connections.max.idle.ms)",
                     conn, limits.idle_timeout_ms)
            return None
        except asyncio.IncompleteReadError as e:
            if e.partial:
                raise ProtocolError(f"connection closed inside a frame size ({len(e.partial)} of 4 bytes)") from e
            return None
        (size,) = SIZE.unpack(head)
        if conn.sasl is not None and not conn.sasl.complete:  # unauthenticated: Kafka's smaller bound
            if not 0 <= size <= SASL_SERVER_MAX_RECEIVE_SIZE or (size < 8 and not conn.sasl.raw_tokens):
                raise ProtocolError(f"frame size {size} before SASL authentication is outside"
                                    f" 8..{SASL_SERVER_MAX_RECEIVE_SIZE}")
        elif size < 8 or size > limits.max_request_bytes:
            raise ProtocolError(
                f"request frame size {size} is outside 8..{limits.max_request_bytes} (socket.request.max.bytes)"
            )
        await self._pool.acquire(size)
        try:
            return await self._read_body(conn, size)
        except BaseException:
            self._pool.release(size)
            raise

    async def _read_body(self, conn: ClientConnection, size: int) -> bytes | bytearray:
        """``size`` bytes, within socket.request.body.timeout.ms; memory grows only as bytes arrive."""
        timeout_ms = self._limits.request_body_timeout_ms
        body: bytes | bytearray = b""
        try:
            async with asyncio.timeout(timeout_ms / 1000.0):
                body = await conn.reader.read(size)
                if len(body) < size and body:
                    body = bytearray(body)
                    while len(body) < size:
                        chunk = await conn.reader.read(size - len(body))
                        if not chunk:
                            break
                        body += chunk
        except TimeoutError as e:
            raise ProtocolError(f"only {len(body)} of a {size}-byte request frame arrived within {timeout_ms} ms"
                                " (socket.request.body.timeout.ms)") from e
        if len(body) < size:
            raise ProtocolError(f"connection closed after {len(body)} of a {size}-byte frame")
        return body

    def _decode(self, frame: bytes | bytearray) -> tuple[int, int, int, ApiRequest | None]:
        """(api key, version, correlation id, request); the request is None for an ApiVersions request
        of a version the broker does not serve (answered with the versions it does, KIP-511)."""
        api_key, version, correlation_id = peek_request(frame)
        entry = BROKER_APIS.get(api_key)  # type: ignore[call-overload]
        if entry is None:
            raise ProtocolError(f"unknown API key {api_key} (correlation id {correlation_id})")
        request_cls, _, lo, hi = entry
        if not lo <= version <= hi:
            if api_key == ApiKey.API_VERSIONS:
                return api_key, version, correlation_id, None
            raise ProtocolError(f"{api_name(api_key)} v{version} is not supported (broker serves v{lo}..v{hi})")
        try:
            request = decode_request(request_cls, frame, version)
        except Exception as e:
            raise ProtocolError(
                f"cannot decode {api_name(api_key)} v{version} request of {len(frame)} bytes: {e!r}"
            ) from e
        return api_key, version, correlation_id, request

    async def _handle(self, conn: ClientConnection, decoded: tuple[int, int, int, ApiRequest | None]) -> None:
        api_key, version, correlation_id, request = decoded
        if request is None:
            await self._send_response(conn, unsupported_version_response(), correlation_id)
            return
        conn.client_id = request.header.client_id
        started = time.monotonic()
        if api_key in SASL_APIS:
            await self._sasl_request(conn, api_key, request, version, correlation_id)
            return
        if conn.sasl is not None and not conn.sasl.complete and api_key != ApiKey.API_VERSIONS:
            raise SaslAuthenticationError(f"{api_name(api_key)} request before SASL authentication completed")
        entries = check_entries(api_key, request, self._limits.max_request_entries)
        reply = await self._handlers[ApiKey(api_key)](self._context, request, version)
        if isinstance(reply, FetchReply):
            await self._send_fetch(conn, reply, correlation_id)
        elif reply is not None:
            await self._send_response(conn, reply, correlation_id, off_loop=entries > SLICE)
        self._context.metrics.request(api_name(api_key), time.monotonic() - started)

    async def _sasl_request(self, conn: ClientConnection, api_key: int, request: Any, version: int,
                            correlation_id: int) -> None:
        """SaslHandshake / SaslAuthenticate: answered, then the connection is closed on a failure."""
        exchange = conn.sasl
        if api_key == ApiKey.SASL_HANDSHAKE:
            mechanisms = conn.served.sasl.mechanisms if conn.served and conn.served.sasl else ()
            reply = handshake_response(exchange, request, version, mechanisms)
            await self._send_response(conn, reply, correlation_id)
            if reply.error_code:
                raise SaslAuthenticationError(f"SaslHandshake for mechanism {request.mechanism!r} refused with"
                                              f" error {reply.error_code} (enabled: {', '.join(mechanisms)})")
            return
        reply, failure = authenticate_response(exchange, request, version)
        await self._send_response(conn, reply, correlation_id)
        if failure is not None:
            raise SaslAuthenticationError(f"{failure} (mechanism {exchange.mechanism if exchange else None})")
        self._authenticated(conn)

    async def _raw_sasl_token(self, conn: ClientConnection, token: bytes) -> None:
        """A SASL token framed on its own (after SaslHandshake v0): the answer goes back the same way; a
        failure just closes the connection, as Kafka does (v0 has no way to say why)."""
        assert conn.sasl is not None
        answer = conn.sasl.evaluate(token)
        conn.writer.write(SIZE.pack(len(answer)) + answer)
        await conn.writer.drain()
        if conn.sasl.complete:
            self._authenticated(conn)

    @staticmethod
    def _authenticated(conn: ClientConnection) -> None:
        if conn.sasl is not None and conn.sasl.complete:
            SESSION.set(Session(conn.listener_name, conn.sasl.principal))
            log.debug("%s authenticated as %s with %s", conn, conn.sasl.principal, conn.sasl.mechanism)

    async def _send_response(self, conn: ClientConnection, response: ApiResponse, correlation_id: int, *,
                             off_loop: bool = False) -> None:
        """``off_loop``: encode in a worker thread (an answer with many entries takes long to encode)."""
        response.with_header(correlation_id=correlation_id)
        encode = partial(response.encode, header=True, framed=True)
        conn.writer.write(await asyncio.to_thread(encode) if off_loop else encode())
        await conn.writer.drain()

    async def _send_fetch(self, conn: ClientConnection, reply: FetchReply, correlation_id: int) -> None:
        """Write the response in pieces of about WRITE_BATCH_BYTES, each drained to the socket before
        the next is read from disk, so a slow reader holds little memory; large slices go by sendfile.

        Under TLS the kernel cannot send file bytes itself (they must be encrypted in this process), so
        every slice takes the batch path instead: preadv reads it from the page cache straight into the
        batch's one bytearray, and the TLS transport encrypts from that buffer; no per-record bytes
        object is made and no more than about WRITE_BATCH_BYTES of plaintext is held per connection."""
        loop = asyncio.get_running_loop()
        batch: list[Any] = []
        batch_bytes = 0
        for chunk in encode_fetch_response(reply.version, correlation_id, reply.topics):
            if isinstance(chunk, DownConverted):  # Fetch v0..3: converted a piece at a time, as it is sent
                for piece in chunk.pieces():
                    batch.append(piece)
                    batch_bytes += len(piece)
                    if batch_bytes >= WRITE_BATCH_BYTES:
                        await self._write_batch(conn, batch, batch_bytes)
                        batch, batch_bytes = [], 0
                continue
            size = len(chunk) if isinstance(chunk, bytes) else chunk.size
            if not conn.tls and not isinstance(chunk, bytes) and size >= SENDFILE_MIN_BYTES:
                await self._write_batch(conn, batch, batch_bytes)
                batch, batch_bytes = [], 0
                sent = await loop.sendfile(conn.writer.transport, chunk.file, chunk.position, size)
                if sent != size:  # the segment shrank under us: the frame is now wrong, so end it
                    raise ConnectionError(f"sendfile sent {sent} of {size} bytes")
                continue
            batch.append(chunk)
            batch_bytes += size
            if batch_bytes >= WRITE_BATCH_BYTES:
                await self._write_batch(conn, batch, batch_bytes)
                batch, batch_bytes = [], 0
        await self._write_batch(conn, batch, batch_bytes)

    @staticmethod
    async def _write_batch(conn: ClientConnection, batch: list[Any], size: int) -> None:
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
        conn.writer.write(buffer)
        await conn.writer.drain()
