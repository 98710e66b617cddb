"""The broker's listening sockets (:class:`~metaq.broker.network.BrokerServer`): binding every listener's port before
the broker registers (port 0 gets a free one), accepting once it is registered, closing, and what is set up on each
accepted socket before its first frame (TCP options, the TLS handshake that names the client's certificate
principal).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
from abc import abstractmethod
from functools import partial

from metaq.broker.auth.stage import ServedListener
from metaq.broker.auth.tls import certificate_principal
from metaq.broker.client_connection import ClientConnection
from metaq.broker.connection_limits import ConnectionLimits
from metaq.broker.context import BrokerContext
from metaq.errors import ConfigError

log = logging.getLogger(__name__)


# Bytes a connection's reader may buffer ahead of the frame being read (asyncio pauses at twice this).
READ_BUFFER_LIMIT = 1 << 20


class ListenerSockets:
    """Binds, starts and closes the listeners, and sets up each accepted socket, for :class:`BrokerServer`."""

    _listeners: list[ServedListener]
    _servers: dict[str, asyncio.Server]
    _context: BrokerContext | None
    _connections: set[asyncio.Task[None]]
    _send_buffer: int
    _receive_buffer: int
    _limits: ConnectionLimits

    @abstractmethod
    async def _serve(self, served: ServedListener, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None: ...

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
                errno = e.errno if not isinstance(e, socket.gaierror) else None
                reason = os.strerror(errno) if errno is not None and errno > 0 else (e.strerror or str(e))
                await self.close()
                raise ConfigError(f"config 'listeners': cannot listen on {listener.name} {listener.host}:"
                                  f"{listener.port}: {reason}") from e

    async def start_serving(self, context: BrokerContext) -> None:
        """Accept connections; requests are handled with ``context`` (the broker's, once it is registered),
        bound to each connection's session."""
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

    def _tune_socket(self, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is None:
            return
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._send_buffer > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._send_buffer)
        if self._receive_buffer > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._receive_buffer)

    async def _start_tls(self, conn: ClientConnection) -> str | None:
        """The TLS handshake (after the connection limits let it in: a handshake costs CPU), bounded by
        socket.request.body.timeout.ms; a failed one is logged with the peer and ends the connection.
        Returns the principal of the client's certificate, if it sent one."""
        assert conn.served.ssl_context is not None
        try:
            await conn.writer.start_tls(conn.served.ssl_context,
                                        ssl_handshake_timeout=self._limits.request_body_timeout_ms / 1000.0)
        except (ssl.SSLError, ConnectionError, TimeoutError) as e:
            reason = getattr(e, "reason", None) or type(e).__name__
            log.warning("Failed authentication with %s (TLS handshake on listener %s: %s)", conn,
                     conn.served.listener.name, reason)
            raise ConnectionResetError from None
        return certificate_principal(conn.writer.get_extra_info("ssl_object"))
