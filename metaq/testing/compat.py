"""pytest plugin: record the outcome of every ``@pytest.mark.compat(capability, peer)`` test for docs/compatibility.md.

A compatibility claim is a test: its marker names a row (the capability) and a column (the peer: a Kafka version
or tool) of the table that ``tools/compat_table.py`` renders. Each run merges its outcomes into a JSON file
(``$METAQ_COMPAT_RESULTS``, default ``.compat-results.json`` in the rootdir, not committed), keyed by test id, so
that running one file updates only its own cells::

    {"tests": {"integration_tests/test_x.py::test_y[kafka-3.9.2]":
        {"capability": "produce and consume", "peer": "Kafka 3.9.2", "outcome": "failed",
         "reason": "AssertionError: ...", "recorded": "2026-11-28T01:30:00Z"}}}

A test counts as failed if any phase (setup, call, teardown) failed, skipped if it was skipped (with pytest's
reason), passed otherwise. Parametrized tests carry the marker through ``pytest.param(..., marks=...)``.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

ENV_RESULTS = "METAQ_COMPAT_RESULTS"
DEFAULT_RESULTS = ".compat-results.json"
PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
_REASON_CHARS = 300


@dataclass(frozen=True)
class CompatResult:
    """One test's verdict on one (capability, peer) cell."""

    capability: str
    peer: str
    outcome: str
    reason: str
    recorded: str


def results_path(rootdir: Path) -> Path:
    configured = os.environ.get(ENV_RESULTS)
    return Path(configured) if configured else rootdir / DEFAULT_RESULTS


def load_results(path: Path) -> dict[str, CompatResult]:
    """The recorded results by test id (empty if the file is missing)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    return {nodeid: CompatResult(**entry) for nodeid, entry in data.get("tests", {}).items()}


_results = pytest.StashKey[dict[str, CompatResult]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_results] = {}


def _reason(report: pytest.TestReport) -> str:
    """One line: the skip reason, or the last line of the failure (the exception and its message)."""
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(report.longrepr, "reprcrash", None)
    text = str(crash.message) if crash is not None else str(report.longrepr)
    line = " ".join(text.split())
    return line if len(line) <= _REASON_CHARS else line[:_REASON_CHARS - 1] + "…"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Any:
    report: pytest.TestReport = yield
    marker = item.get_closest_marker("compat")
    if marker is None:
        return report
    if len(marker.args) != 2:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.compat(capability, peer) takes two arguments")
    capability, peer = (str(arg) for arg in marker.args)
    results = item.config.stash[_results]
    previous = results.get(item.nodeid)
    if report.failed:
        outcome = FAILED
    elif report.skipped:
        outcome = SKIPPED
    elif report.when == "call" or previous is None:
        outcome = PASSED
    else:
        return report  # a passing teardown keeps the call's verdict
    if previous is not None and previous.outcome == FAILED:
        return report  # the first failure is the reason
    results[item.nodeid] = CompatResult(capability, peer, outcome, _reason(report) if outcome != PASSED else "",
                                        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Merge this run's results into the results file, under a lock (parallel runs of different files)."""
    results = session.config.stash.get(_results, {})
    if not results:
        return
    path = results_path(Path(session.config.rootpath))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        merged = load_results(path)
        merged.update(results)
        scratch = path.with_name(f".{path.name}.{os.getpid()}")
        scratch.write_text(json.dumps({"tests": {k: asdict(v) for k, v in sorted(merged.items())}}, indent=1,
                                      ensure_ascii=False) + "\n")
        scratch.replace(path)
