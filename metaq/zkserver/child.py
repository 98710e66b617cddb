"""Child JVMs that never outlive us: spawned from a thread that lives as long as the process (their
``PR_SET_PDEATHSIG`` fires when the forking thread exits), every live server stopped at interpreter exit, and the tail
of a child's log for error messages.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from metaq.zkserver.server import ZooKeeperServer

log = logging.getLogger(__name__)


def _tail(path: Path, lines: int) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


_Spawn = tuple[Callable[[], subprocess.Popen[bytes]], Future[subprocess.Popen[bytes]]]
"""A start handed to the spawner thread: the function that forks, and the future its process goes to."""


class _Spawner:
    """Starts child processes from one long-lived daemon thread.

    PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not the process. A server
    started from a short-lived thread (a fault-injection helper, say) would be killed when that thread
    returns; so such starts are handed to this thread, which lives until the process exits. The main thread
    spawns directly.
    """

    _lock = threading.Lock()
    _queue: ClassVar[queue.SimpleQueue[_Spawn] | None] = None

    @classmethod
    def run(cls, fn: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        if threading.current_thread() is threading.main_thread():
            return fn()
        future: Future[subprocess.Popen[bytes]] = Future()
        cls._ensure_thread().put((fn, future))
        return future.result()  # Popen itself is bounded; a JVM exec takes milliseconds

    @classmethod
    def _ensure_thread(cls) -> queue.SimpleQueue[_Spawn]:
        with cls._lock:
            if cls._queue is None:
                cls._queue = queue.SimpleQueue()
                threading.Thread(target=cls._loop, args=(cls._queue,), name="zk-spawner", daemon=True).start()
            return cls._queue

    @staticmethod
    def _loop(jobs: queue.SimpleQueue[_Spawn]) -> None:
        while True:
            fn, future = jobs.get()
            try:
                future.set_result(fn())
            except BaseException as e:  # handed back to the caller
                future.set_exception(e)


# Servers holding a JVM or a temporary work directory (also after a failed start or a kill), stopped at
# interpreter exit. Strong references on purpose: a server object garbage-collected while its JVM runs would
# otherwise leak the JVM and its files until we exit.
_LIVE: set[ZooKeeperServer] = set()
_LIVE_LOCK = threading.Lock()


def _stop_all_at_exit() -> None:
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for server in servers:
        try:
            server.stop(timeout=5)
        except Exception:  # best effort at exit; PDEATHSIG is the backstop
            log.exception("stopping %r at exit", server)


atexit.register(_stop_all_at_exit)
