"""The thread that replays a recover store through the listener at an interval.

See :mod:`metaq.consumer.recover`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from metaq.consumer.message import MessageAndMetadata
from metaq.consumer.recover.format import (
    ReplayResult,
)
from metaq.consumer.recover.recover_store import RecoverStore

log = logging.getLogger(__name__)


class RecoverManager:
    """Replays one store through the listener: first ``initial_delay_s`` after :meth:`start` (MetaQ: 5 s),
    then every ``interval_ms`` (``metaq.recover.interval.ms``). The thread never dies of a failing pass."""

    def __init__(
        self,
        store: RecoverStore,
        handler: Callable[[MessageAndMetadata], object],
        *,
        interval_ms: int,
        max_attempts: int,
        initial_delay_s: float = 5.0,
    ) -> None:
        self.store = store
        self._handler = handler
        self._interval_s = interval_ms / 1000.0
        self._initial_delay_s = initial_delay_s
        self._max_attempts = max_attempts
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.passes = 0
        self.last_result: ReplayResult | None = None
        self._thread = threading.Thread(target=self._run, name=f"metaq-recover-{store.topic}@{store.group}",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def trigger(self) -> None:
        """Run a pass now instead of at the next interval."""
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop after the entry being replayed; False if the listener is still busy after ``timeout``."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)  # bounded: a listener stuck in user code cannot be interrupted
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            log.warning("%s: still running after %.1fs (listener busy); left behind", self._thread.name, timeout)
            return False
        return True

    def _run(self) -> None:
        delay = self._initial_delay_s
        while not self._stop.is_set():
            self._wake.wait(delay)  # woken early by trigger() or stop()
            self._wake.clear()
            if self._stop.is_set():
                return
            self._run_pass()
            delay = self._interval_s

    def _run_pass(self) -> None:
        try:
            result = self.store.replay(self._handler, max_attempts=self._max_attempts,
                                       should_stop=self._stop.is_set)
        except Exception:
            log.exception("%s: replay pass failed; next one in %.1fs", self._thread.name, self._interval_s)
            return
        self.passes += 1
        self.last_result = result
        if result.succeeded or result.failed or result.dead:
            log.info("%s: replayed %d, failed %d, newly dead %d", self._thread.name, result.succeeded,
                     result.failed, result.dead)
