"""Every PartitionLog a test opens has its files closed at teardown.

Tests that simulate a crash abandon their logs on purpose (no flush, no clean shutdown), and tests of one
behaviour often leave the log open; a dying process's files are closed by the OS, here by this fixture,
without flushing. Otherwise they are closed whenever the garbage collector gets to them, and the
ResourceWarning fails whatever test runs then (warnings are errors).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from metaq.broker.log.partition_log import PartitionLog


@pytest.fixture(autouse=True)
def _close_abandoned_logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    opened: list[PartitionLog] = []  # strong references: a log collected mid-test would warn there
    original = PartitionLog.__init__

    def init(self: PartitionLog, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        opened.append(self)

    monkeypatch.setattr(PartitionLog, "__init__", init)
    yield
    for log in opened:
        log._close_files()  # idempotent; unflushed, as a crash leaves them
