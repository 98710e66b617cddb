"""metaq.zkclient.PollHandler: kazoo's select contract (readable, writable, timeout) on real sockets (a
real session through it: integration_tests/test_zkserver_poll_handler.py)."""

from __future__ import annotations

import socket
import time

from metaq.zkclient import PollHandler


def test_select_reports_readable_and_writable_sockets() -> None:
    handler = PollHandler()
    a, b = socket.socketpair()
    with a, b:
        readable, writable, errors = handler.select([a, b], [a], [], 0)
        assert (readable, writable, errors) == ([], [a], [])  # nothing to read yet; a socket can be written
        b.send(b"x")
        readable, _, _ = handler.select([a, b], [], [], 1.0)
        assert readable == [a]
        b.close()
        assert handler.select([a], [], [], 1.0)[0] == [a]  # the peer's close reads as readable (EOF)


def test_select_waits_out_its_timeout() -> None:
    handler = PollHandler()
    a, b = socket.socketpair()
    with a, b:
        started = time.monotonic()
        assert handler.select([a], [], [], 0.05) == ([], [], [])
        assert time.monotonic() - started >= 0.04
