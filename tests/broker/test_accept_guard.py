"""AcceptGuard (metaq/broker/accept_guard.py): when accept() fails for want of descriptors, waiting connections are
closed at once and one line is logged, instead of asyncio's storm of "socket.accept() out of system resource".

In-process: a real event loop and real sockets, under a soft RLIMIT_NOFILE lowered for the test's duration."""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import socket
from collections.abc import Iterator

import pytest

from metaq.broker.accept_guard import ACCEPT_FAILED, AcceptGuard

WAITING = 10


@pytest.fixture
def low_limit() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 64, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _fill_descriptors() -> list[int]:
    """Open /dev/null until the process has no descriptor left."""
    held = []
    while True:
        try:
            held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            return held


def _closed(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


async def _exhaust_and_accept(guard: AcceptGuard | None) -> list[bool]:
    loop = asyncio.get_running_loop()
    if guard is not None:
        guard.install(loop)
    listening = socket.create_server(("127.0.0.1", 0))  # listening: connections wait in its backlog
    port = listening.getsockname()[1]
    clients = []
    held: list[int] = []
    server = None
    try:
        for _ in range(WAITING):
            client = socket.create_connection(("127.0.0.1", port))
            client.setblocking(False)
            clients.append(client)
        held = _fill_descriptors()
        server = await asyncio.start_server(lambda r, w: w.close(), sock=listening)
        for _ in range(20):  # a few loop passes: the listening socket is readable with 10 connections waiting
            await asyncio.sleep(0.01)
        return [_closed(c) for c in clients]
    finally:
        for fd in held:
            os.close(fd)
        for client in clients:
            client.close()
        if server is not None:
            server.close()
            await server.wait_closed()
        listening.close()
        if guard is not None:
            guard.uninstall(loop)


def test_waiting_connections_are_closed_and_one_line_logged(low_limit: None,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    closed = asyncio.run(_exhaust_and_accept(AcceptGuard()))
    assert all(closed), closed  # accepted with the reserve descriptor and closed: the clients are not left hanging
    lines = [r for r in caplog.records if r.name == "metaq.broker.accept_guard"]
    assert len(lines) == 1 and "RLIMIT_NOFILE" in lines[0].getMessage()
    assert not [r for r in caplog.records if ACCEPT_FAILED in r.getMessage()]  # asyncio's own report, not logged


def test_without_the_guard_asyncio_reports_every_attempt(low_limit: None, caplog: pytest.LogCaptureFixture) -> None:
    """What the guard replaces (asyncio 3.11's accept loop): a report per accept() of the pass, clients waiting."""
    caplog.set_level(logging.ERROR)
    closed = asyncio.run(_exhaust_and_accept(None))
    # the clients wait (a full run once saw the first one closed, by a descriptor freed while the pass ran)
    assert not all(closed)
    assert len([r for r in caplog.records if ACCEPT_FAILED in r.getMessage()]) > WAITING
