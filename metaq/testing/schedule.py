"""pytest plugin: run the longest test modules first, so that parallel workers finish together.

``make test`` runs the suite on two pytest-xdist workers with ``--dist loadfile``: each worker takes whole
modules (their module-scoped brokers stay shared) from one queue, in the queue's order. xdist's own order (the
default ``--loadscope-reorder``) sorts modules by their number of tests, which puts the slowest modules (a few
long tests each: Spark jobs, Kafka Streams, leader kills) at the end: one worker then runs a several-minute module
alone while the other has nothing left. Longest-first is the classic list-scheduling remedy: the last modules
handed out are the short ones, so the workers' finishing times differ by about one short module.

The expected durations come from ``test-durations.json`` in the rootdir (seconds per module, all phases of all
its tests), written by a previous run with ``METAQ_STORE_DURATIONS=1``; a module it does not list counts as
:data:`UNKNOWN_INTEGRATION_S` under ``integration_tests/`` (it starts processes) and :data:`UNKNOWN_UNIT_S`
elsewhere. The order only changes which module starts when; tests inside a module keep their order, and a
module's tests stay together. ``make test`` passes ``--no-loadscope-reorder`` so that xdist keeps this order.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

DURATIONS_FILE = "test-durations.json"
ENV_STORE = "METAQ_STORE_DURATIONS"
UNKNOWN_INTEGRATION_S = 30.0
UNKNOWN_UNIT_S = 1.0

_recorder = pytest.StashKey["DurationRecorder"]()


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def load_durations(path: Path) -> dict[str, float]:
    """Seconds per module path from a durations file (empty if there is none yet)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    return {module: float(seconds) for module, seconds in data.get("modules", {}).items()}


def expected_seconds(module: str, known: dict[str, float]) -> float:
    if module in known:
        return known[module]
    return UNKNOWN_INTEGRATION_S if module.startswith("integration_tests/") else UNKNOWN_UNIT_S


def longest_first(items: list[pytest.Item], known: dict[str, float]) -> list[pytest.Item]:
    """``items`` regrouped by module, the modules by expected duration (longest first, ties in collection order),
    each module's tests in their collected order."""
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(module_of(item.nodeid), []).append(item)
    order = sorted(enumerate(modules), key=lambda pair: (-expected_seconds(pair[1], known), pair[0]))
    return [item for _, module in order for item in modules[module]]


class DurationRecorder:
    """Adds up the seconds of every phase of every test per module (in the controller: every worker's reports)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[module_of(report.nodeid)] += report.duration


def pytest_configure(config: pytest.Config) -> None:
    recorder = DurationRecorder()
    config.stash[_recorder] = recorder
    config.pluginmanager.register(recorder, "metaq-durations")


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    items[:] = longest_first(items, load_durations(config.rootpath / DURATIONS_FILE))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """With ``METAQ_STORE_DURATIONS=1``, merge this run's module durations into the durations file (the controller
    writes it: it sees every worker's reports; modules this run did not touch keep their figures)."""
    config = session.config
    if not os.environ.get(ENV_STORE) or hasattr(config, "workerinput"):
        return
    path = config.rootpath / DURATIONS_FILE
    durations = load_durations(path)
    durations.update({module: round(seconds, 1) for module, seconds in config.stash[_recorder].seconds.items()})
    ordered = dict(sorted(durations.items(), key=lambda pair: (-pair[1], pair[0])))
    path.write_text(json.dumps({"modules": ordered}, indent=1) + "\n")
