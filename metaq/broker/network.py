"""The broker's socket layer: framing, admission (limits, the authentication stage), dispatch, and isolation
of misbehaving clients. What a request means is the handlers' business (metaq/broker/handlers), who the client
is the authentication stage's (metaq/broker/auth/stage.py), and how an answer is written the answer's own
(metaq/broker/response.py): this layer never looks at what it sends (docs/architecture.md, "The request path").

Each connection is served by one task that handles its requests in order (as Kafka mutes a channel
while a request is in flight), so responses keep the request order; a long-polling fetch waits without
holding up other connections. A frame that is too large, does not decode, or names an unknown API or
version closes that connection only, with a log line naming the client; the broker keeps serving.

A client over a quota (docs/quotas.md, metaq/broker/quota) is throttled here: a KIP-219 version gets its answer
at once and its connection is then not read for the throttle time; an older version gets its answer after it.
Only that connection's task waits.

Resources a client can hold are bounded (see :class:`ConnectionLimits`): connections in total and per
address, an idle connection's lifetime, the time to send a frame's body once its size is known, and the
bytes of request frames read but not yet handled. A frame is read into memory as it arrives (a client
that stalls pins only what it sent), and the next request is read only once the response is out.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

from metaq.broker.auth.sasl import SaslAuthenticationError
from metaq.broker.auth.stage import AuthenticationStage, ServedListener
from metaq.broker.client_connection import ClientConnection, ReadExpired
from metaq.broker.connection_limits import ConnectionLimits, RequestMemoryPool
from metaq.broker.context import BrokerContext
from metaq.broker.handlers.api_versions import unsupported_version_response
from metaq.broker.listener_sockets import ListenerSockets
from metaq.broker.quota.request_path import serve as serve_with_quotas
from metaq.broker.quota.throttling import NO_THROTTLE, Throttle
from metaq.broker.request_bounds import SLICE, check_entries
from metaq.broker.response import Encoded, Handler, Outbound
from metaq.errors import ProtocolError
from metaq.protocol.apis import BROKER_APIS, ApiKey, api_name
from metaq.protocol.framing import SIZE, decode_request, peek_request
from metaq.protocol.messages import ApiRequest

log = logging.getLogger(__name__)

# At most one log line per this many seconds about connections refused for a limit.
REFUSAL_LOG_INTERVAL_S = 10.0


OFF_LOOP_DECODE_BYTES = 64 * 1024
"""Frames at least this large are decoded in a worker thread: decoding a request that names a million
entries takes seconds of pure Python, which on the event loop would stall every other connection."""


_IDLE = "idle"
_BODY = "body"


@dataclass(frozen=True)
class Decoded:
    """A request frame decoded; ``request`` is None for an ApiVersions request of a version the broker does
    not serve (answered with the versions it does, KIP-511)."""

    api_key: ApiKey
    version: int
    correlation_id: int
    request: ApiRequest | None


class BrokerServer(ListenerSockets):
    """The broker's socket layer (module docstring): owns the listening servers (:class:`ListenerSockets`), the task
    of every open connection and the connection counts per address (``max.connections[.per.ip]``), the request
    memory pool, and the handler of every API it dispatches to; each request is handled with the broker's context
    bound to its connection's session."""

    def __init__(
        self,
        handlers: Mapping[ApiKey, Handler],
        *,
        listeners: list[ServedListener],
        limits: ConnectionLimits | None = None,
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
    ) -> None:
        self._context: BrokerContext | None = None
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

    async def _serve(self, served: ServedListener, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        conn = ClientConnection(reader, writer, served)
        if not self._admit(conn):
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None and self._context is not None
        metrics = self._context.metrics
        self._connections.add(task)
        metrics.connection_opened()
        try:
            self._tune_socket(writer)
            principal = await self._start_tls(conn) if conn.tls else None
            conn.auth = served.authentication(conn.host, principal)
            await self._serve_requests(conn, conn.auth)
        except SaslAuthenticationError as e:
            log.warning("Failed authentication with %s (%s)", conn, e)
            metrics.error("NONE", "SASL_AUTHENTICATION_FAILED")
        except ProtocolError as e:
            log.warning("closing connection from %s: %s", conn, e)
            metrics.error("NONE", "PROTOCOL")
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass  # the client went away; nothing to answer
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("closing connection from %s after an unexpected error", conn)
        finally:
            conn.stop_watchdog()
            metrics.connection_closed()
            self._connections.discard(task)
            self._per_ip[conn.host] -= 1
            if self._per_ip[conn.host] <= 0:
                del self._per_ip[conn.host]
            writer.close()

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

    async def _serve_requests(self, conn: ClientConnection, auth: AuthenticationStage) -> None:
        while True:
            frame = await self._read_frame(conn, auth)
            if frame is None:
                return
            size = len(frame)
            throttle = NO_THROTTLE
            try:
                if auth.raw_token_expected:  # a token framed on its own, not a request
                    await auth.raw_token(bytes(frame)).write(Outbound(conn.writer, conn.tls, 0))
                    continue
                if size >= OFF_LOOP_DECODE_BYTES:
                    request = await asyncio.to_thread(self._decode, frame)
                else:
                    request = self._decode(frame)
                del frame  # a large produce is held once (decoded), not twice, while it is handled
                throttle = await self._handle(conn, auth, request, size)
            finally:
                self._pool.release(size)
            if throttle.mute_s > 0:
                await _muted(conn, throttle.mute_s)

    async def _read_frame(self, conn: ClientConnection, auth: AuthenticationStage) -> bytes | bytearray | None:
        """The next frame's body, or None when the client closed (or idled out) between frames.

        On return the frame's bytes are counted in the request memory pool; the caller releases them."""
        limits = self._limits
        conn.expect(_IDLE, limits.idle_timeout_ms)
        try:
            head = await conn.reader.readexactly(4)
        except ReadExpired:
            log.debug("closing connection from %s: idle for %d ms (connections.max.idle.ms)",
                     conn, limits.idle_timeout_ms)
            return None
        except asyncio.IncompleteReadError as e:
            if e.partial:
                raise ProtocolError(f"connection closed inside a frame size ({len(e.partial)} of 4 bytes)") from e
            return None
        conn.read_done()
        (size,) = SIZE.unpack(head)
        if auth.check_frame_size(size):  # unauthenticated: the stage's bound
            pass
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
        conn.expect(_BODY, timeout_ms)
        try:
            body = await conn.reader.read(size)
            if len(body) < size and body:
                body = bytearray(body)
                while len(body) < size:
                    chunk = await conn.reader.read(size - len(body))
                    if not chunk:
                        break
                    body += chunk
        except ReadExpired as e:
            raise ProtocolError(f"only {len(body)} of a {size}-byte request frame arrived within {timeout_ms} ms"
                                " (socket.request.body.timeout.ms)") from e
        finally:
            conn.read_done()
        if len(body) < size:
            raise ProtocolError(f"connection closed after {len(body)} of a {size}-byte frame")
        return body

    def _decode(self, frame: bytes | bytearray) -> Decoded:
        """The frame's API, version, correlation id and request."""
        number, version, correlation_id = peek_request(frame)
        if number not in BROKER_APIS:
            raise ProtocolError(f"unknown API key {number} (correlation id {correlation_id})")
        api_key = ApiKey(number)
        request_cls, _, lo, hi = BROKER_APIS[api_key]
        if not lo <= version <= hi:
            if api_key == ApiKey.API_VERSIONS:
                return Decoded(api_key, version, correlation_id, None)
            raise ProtocolError(f"{api_name(api_key)} v{version} is not supported (broker serves v{lo}..v{hi})")
        try:
            request = decode_request(request_cls, frame, version)
        except Exception as e:
            raise ProtocolError(
                f"cannot decode {api_name(api_key)} v{version} request of {len(frame)} bytes: {e!r}"
            ) from e
        return Decoded(api_key, version, correlation_id, request)

    async def _handle(self, conn: ClientConnection, auth: AuthenticationStage, decoded: Decoded,
                      size: int) -> Throttle:
        """Admit the request (authentication stage, entry limits), dispatch it (client quotas counted, see
        metaq/broker/quota), and have its answer written; answers the request's throttle."""
        request = decoded.request
        if request is None:
            await Encoded(unsupported_version_response()).write(Outbound(conn.writer, conn.tls,
                                                                         decoded.correlation_id))
            return NO_THROTTLE
        conn.client_id = request.header.client_id
        started = time.monotonic()
        answered = auth.answer(decoded.api_key, request, decoded.version)
        if answered is not None:  # the stage's own (SASL) answer: not counted as a request
            await answered.write(Outbound(conn.writer, conn.tls, decoded.correlation_id))
            return NO_THROTTLE
        entries = check_entries(decoded.api_key, request, self._limits.max_request_entries)
        assert self._context is not None
        context = conn.bind(self._context)
        response, throttle = await serve_with_quotas(context, self._handlers[decoded.api_key], decoded.api_key,
                                                     request, decoded.version, size)
        if throttle.delay_s > 0:  # a client that does not back off itself gets its answer late
            await asyncio.sleep(throttle.delay_s)
        if response is not None:
            await response.write(Outbound(conn.writer, conn.tls, decoded.correlation_id, large=entries > SLICE))
        context.metrics.request(api_name(decoded.api_key), time.monotonic() - started)
        return throttle


async def _muted(conn: ClientConnection, seconds: float) -> None:
    """Read nothing from a throttled client for ``seconds`` (Kafka mutes its channel): its socket is not
    read, so its requests wait in the kernel; only this connection's task waits."""
    transport = cast("asyncio.Transport", conn.writer.transport)  # a stream's transport reads and writes
    transport.pause_reading()
    try:
        await asyncio.sleep(seconds)
    finally:
        if not transport.is_closing():
            transport.resume_reading()
