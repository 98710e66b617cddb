"""The Timer thread that batch-commits consumed offsets every ``auto.commit.interval.ms``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from metaq.errors import MetaqError

log = logging.getLogger(__name__)


class AutoCommitter:
    """Calls ``commit`` every interval (the first after one interval, as Kafka's scheduler does)."""

    def __init__(self, commit: Callable[[], None], interval_ms: int, *, name: str) -> None:
        self._commit = commit
        self._interval_s = interval_ms / 1000.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)  # bounded: a commit in flight is a single ZooKeeper transaction

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self._commit()
            except MetaqError as e:
                log.warning("auto-commit failed (will retry next interval): %s", e)
            except Exception:
                log.exception("auto-commit failed unexpectedly")
