"""One way for every metaq process to stop on SIGTERM and SIGINT: the first signal asks for an orderly
stop, a second one exits at once.

    with TerminationHandler(consumer.stop_streams):   # main thread only
        for message in stream: ...                    # ends soon after the signal; the with-block commits

``kill``, systemd and Kubernetes send SIGTERM and then, after a grace period, SIGKILL; a person presses
Ctrl-C and, if that seems stuck, presses it again. The first signal runs ``on_stop`` on a thread of its own
(``metaq-signals``), never inside the signal handler: a handler interrupts the main thread anywhere, possibly
while it holds a queue's or the logging module's lock, so the handler itself only writes one byte to a pipe.
``on_stop`` may block (a bounded shutdown is fine). The second signal exits the process with ``128 + signal``
without any cleanup, which is what the second Ctrl-C is for.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any, Self

from metaq.errors import MetaqError

log = logging.getLogger(__name__)

TERMINATION_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)


class TerminationHandler:
    """Installs handlers for ``signals``; see the module docstring for what the first and second do."""

    def __init__(self, on_stop: Callable[[], object], signals: Iterable[signal.Signals] = TERMINATION_SIGNALS) -> None:
        self._on_stop = on_stop
        self._signals = tuple(signals)
        self._previous: dict[signal.Signals, Any] = {}
        self._stopped = threading.Event()
        self._pipe: tuple[int, int] | None = None
        self.received: signal.Signals | None = None
        """The first signal received (set inside the handler: a plain attribute, no lock)."""

    @property
    def requested(self) -> bool:
        return self.received is not None

    def wait(self, timeout: float | None = None) -> bool:
        """Block until ``on_stop`` has run after a signal (True) or ``timeout`` passed (False)."""
        return self._stopped.wait(timeout)

    def install(self) -> Self:
        if threading.current_thread() is not threading.main_thread():
            raise MetaqError("signal handlers can only be installed from the main thread")
        self._pipe = os.pipe()
        threading.Thread(target=self._watch, args=(self._pipe[0],), name="metaq-signals", daemon=True).start()
        for sig in self._signals:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def restore(self) -> None:
        """Put back the handlers that were there before :meth:`install` and end the watcher thread."""
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()
        if self._pipe is not None:
            os.close(self._pipe[1])  # the watcher reads end-of-file and closes the read end
            self._pipe = None

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        """Async-signal context: no locks, no logging; see the module docstring."""
        if self.received is not None:
            os._exit(128 + signum)
        self.received = signal.Signals(signum)
        if self._pipe is not None:
            os.write(self._pipe[1], b"!")

    def _watch(self, read_fd: int) -> None:
        try:
            if not os.read(read_fd, 1):
                return  # restored without a signal
        finally:
            os.close(read_fd)
        name = self.received.name if self.received else "signal"
        log.info("%s received: stopping cleanly (send it again to exit at once)", name)
        try:
            self._on_stop()
        except Exception:
            log.exception("stopping after %s failed", name)
        finally:
            self._stopped.set()

    def __enter__(self) -> Self:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.restore()
