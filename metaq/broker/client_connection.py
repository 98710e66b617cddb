"""One client's connection as the socket layer (metaq/broker/network.py) holds it: its streams, who it is (the
authentication stage, once the TLS handshake is done), the broker's context bound to its session, and the deadline of
the read it awaits (one lazily re-armed timer per connection; a read past its deadline raises
:class:`ReadExpired`).
"""

from __future__ import annotations

import asyncio
import math
import time

from metaq.broker.auth.stage import AuthenticationStage, ServedListener
from metaq.broker.context import BrokerContext
from metaq.errors import MetaqError


class ReadExpired(MetaqError):
    """A read did not complete by its connection's deadline (:meth:`ClientConnection.expect`)."""


class ClientConnection:
    """One client's connection: its streams, who it is (``auth``, once the TLS handshake is done) and the
    broker's context bound to its session (``context``, rebound when the session changes)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, served: ServedListener) -> None:
        self.reader = reader
        self.writer = writer
        self.served = served
        self.tls = served.ssl_context is not None
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.host = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        self.client_id: str | None = None
        self.auth: AuthenticationStage | None = None
        self.context: BrokerContext | None = None
        # the read deadline (time.monotonic(); inf while no read is awaited) and one lazily re-armed timer
        self._deadline = math.inf
        self._waiting_for = ""
        self._watchdog: asyncio.TimerHandle | None = None
        self._watchdog_at = math.inf

    def expect(self, what: str, timeout_ms: int) -> None:
        """The next read must complete within ``timeout_ms``, else it raises :class:`ReadExpired` (``what``
        says which bound). Per frame this only stores the deadline: a timer armed at an earlier deadline, on
        firing, re-arms itself at the current one, so a busy connection arms about one timer per bound's period
        instead of one per read (``asyncio.timeout`` per read was a few percent of a small request's cost:
        docs/performance.md, "The broker's cost per request")."""
        deadline = time.monotonic() + timeout_ms / 1000.0
        self._deadline = deadline
        self._waiting_for = what
        if deadline < self._watchdog_at:
            self._arm(deadline)

    def read_done(self) -> None:
        """No read is awaited now (a request is being handled, however long that takes)."""
        self._deadline = math.inf

    def stop_watchdog(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        self._watchdog_at = math.inf

    def _arm(self, deadline: float) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._watchdog = asyncio.get_running_loop().call_later(max(deadline - time.monotonic(), 0.0), self._watch)
        self._watchdog_at = deadline

    def _watch(self) -> None:
        self._watchdog, self._watchdog_at = None, math.inf
        if self._deadline <= time.monotonic():
            # the awaited read raises it (and the connection closes: the reader stays failed)
            self._deadline = math.inf
            self.reader.set_exception(ReadExpired(self._waiting_for))
        elif self._deadline != math.inf:
            self._arm(self._deadline)

    def bind(self, broker: BrokerContext) -> BrokerContext:
        """The context for this connection's next request: the broker's, bound to the current session."""
        assert self.auth is not None
        if self.context is None or self.context.session is not self.auth.session:
            self.context = broker.for_session(self.auth.session)
        return self.context

    def __str__(self) -> str:
        return f"{self.peer} (client.id={self.client_id!r})" if self.client_id else self.peer
