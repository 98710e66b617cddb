"""What the broker does when ``accept()`` fails for want of descriptors (docs/architecture.md, "Open files").

The broker keeps its own descriptors within a budget (metaq/broker/log/open_files.py: segment files bounded,
``max.connections`` capped by what the limit leaves), so this should not happen; but something else may take
the last descriptors (a burst of files opened briefly, a lower ``ulimit -n`` than the budget assumed).

asyncio's accept loop (``BaseSelectorEventLoop._accept_connection``) then reports "socket.accept() out of system
resource" to the loop's exception handler, stops watching the listening socket and retries a second later; but
it goes on calling ``accept()`` up to ``backlog`` times in the same pass, reporting and scheduling a retry each
time, and every retry does the same: tens of thousands of log lines within seconds, and clients left waiting
in the backlog without an answer. :class:`AcceptGuard` handles that report instead: it keeps one descriptor in
reserve, and on the first failure of a pass gives it up to accept the waiting connections one at a time and
close them at once (the clients see the connection closed and retry later, as after a refusal), so the
remaining calls of the pass find the backlog empty and stop; it logs one line per interval with a count.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from typing import Any

__all__ = ["ACCEPT_FAILED", "AcceptGuard"]

log = logging.getLogger(__name__)

ACCEPT_FAILED = "socket.accept() out of system resource"
"""asyncio's message for an accept() that failed with EMFILE, ENFILE, ENOBUFS or ENOMEM."""
LOG_INTERVAL_S = 10.0
SHED_PER_PASS = 1000
"""Waiting connections closed per failure at most (one pass: asyncio retries the socket a second later)."""


class AcceptGuard:
    """The event loop's exception handler for failed accepts; any other report goes to the previous handler."""

    def __init__(self) -> None:
        self._reserve: int | None = None
        self._previous: Any = None
        self._failures = 0
        self._shed = 0
        self._logged_at = float("-inf")

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        self._reserve = _open_reserve()
        self._previous = loop.get_exception_handler()
        loop.set_exception_handler(self._handle)

    def uninstall(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.set_exception_handler(self._previous)
        reserve, self._reserve = self._reserve, None
        if reserve is not None:
            os.close(reserve)

    def _handle(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") != ACCEPT_FAILED:
            if self._previous is not None:
                self._previous(loop, context)
            else:
                loop.default_exception_handler(context)
            return
        self._failures += 1
        listening = context.get("socket")
        if listening is not None:
            self._shed += self._shed_waiting(listening.fileno())
        self._log(context.get("exception"))

    def _shed_waiting(self, fd: int) -> int:
        """Accept and close the connections waiting on the listening socket ``fd``, with the reserve
        descriptor given up meanwhile; returns how many."""
        if self._reserve is not None:
            os.close(self._reserve)
            self._reserve = None
        shed = 0
        listening = socket.socket(fileno=fd)  # the loop's own socket: detached below, never closed here
        try:
            for _ in range(SHED_PER_PASS):
                try:
                    conn, _ = listening.accept()
                except OSError:  # the backlog is empty (BlockingIOError), or even one descriptor is not there
                    break
                conn.close()
                shed += 1
        finally:
            listening.detach()
            self._reserve = _open_reserve()
        return shed

    def _log(self, error: object) -> None:
        now = time.monotonic()
        if now - self._logged_at < LOG_INTERVAL_S:
            return
        log.error("cannot accept connections: %s (the process's open-file limit, RLIMIT_NOFILE); %d such failures"
                  " and %d waiting connections closed since the last such line", error, self._failures, self._shed)
        self._failures = self._shed = 0
        self._logged_at = now


def _open_reserve() -> int | None:
    try:
        return os.open(os.devnull, os.O_RDONLY)
    except OSError:
        return None
