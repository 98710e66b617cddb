"""tests/ holds the fast tests of pure logic (fakes in-process); anything that starts a process (a broker,
ZooKeeper, a JVM, a CLI, a helper command) belongs in integration_tests/. This guard fails a test here that starts
one, at the point it does, so the boundary holds as tests are added."""

from __future__ import annotations

import os
import subprocess
from typing import NoReturn

import pytest

_MOVE = ("tests/ holds tests that start no process (see tests/conftest.py): a test that starts {what} "
         "belongs in integration_tests/")


def _refuse(what: str) -> object:
    def refuse(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError(_MOVE.format(what=what))

    return refuse


@pytest.fixture(autouse=True)
def _no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Process creation refused for the test's duration: ``subprocess`` (and asyncio's subprocesses, built on it)
    ends in ``Popen._execute_child``; ``multiprocessing`` and hand-made children in ``os.fork``/``posix_spawn``."""
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse("a subprocess"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refuse(f"a child process (os.{name})"))
