"""Poll a condition until it holds or a deadline passes: the one way tests (and the demo harness) wait.

Tests never sleep a fixed time and then assert, because on a loaded machine any fixed sleep is either too short
(flaky) or too long (slow); polling returns as soon as the condition holds and fails with what it waited for.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(predicate: Callable[[], object], timeout: float = 10.0,
               what: str | Callable[[], str] = "the condition", interval: float = 0.05) -> None:
    """Return once ``predicate()`` is truthy; raise AssertionError naming ``what`` after ``timeout`` seconds.

    ``what`` may be a callable, evaluated only on timeout, to describe the state the wait ended in.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what() if callable(what) else what}")
        time.sleep(interval)
