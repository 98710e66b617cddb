"""``metaq zookeeper start [--port P] [--data-dir D] [--tick-time MS]``: run a real ZooKeeper in the foreground.

Prints the connect string on stdout (so that scripts can read it) and runs until SIGINT or SIGTERM, then stops
the server cleanly. The data must outlive the server, or a restart forgets every topic and committed offset
while the brokers keep their logs: with ``--port P`` and no ``--data-dir`` it lives in
``$XDG_DATA_HOME/metaq/zookeeper-P`` (default ``~/.local/share/...``); with neither (a throwaway server on a
free port) in a temporary directory removed at exit, which is said on stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from pathlib import Path

from metaq.signals import TerminationHandler
from metaq.zkserver import ZooKeeperServer

log = logging.getLogger(__name__)

_HEALTH_CHECK_S = 1.0  # how often we look whether the JVM died on its own


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("zookeeper", help="run an embedded Apache ZooKeeper server")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    start = actions.add_parser("start", help="start a standalone server on 127.0.0.1 and run until Ctrl-C")
    start.add_argument("--port", type=int, default=None, help="client port (default: a free port)")
    start.add_argument("--data-dir", type=Path, default=None,
                       help="data directory (default with --port P: $XDG_DATA_HOME/metaq/zookeeper-P; "
                            "without --port: temporary)")
    start.add_argument("--tick-time", type=int, default=2000, metavar="MS", help="tickTime in ms (default 2000)")
    start.add_argument("--start-timeout", type=float, default=60.0, metavar="S", help=argparse.SUPPRESS)
    start.set_defaults(func=_start)


def _start(args: argparse.Namespace) -> int:
    stop = threading.Event()
    handler = TerminationHandler(stop.set).install()  # a second signal exits at once (the JVM dies with us)
    data_dir = args.data_dir or (default_data_dir(args.port) if args.port is not None else None)
    if data_dir is None:
        print("metaq zookeeper: no --port/--data-dir: the data is temporary and removed at exit", file=sys.stderr)
    server = ZooKeeperServer(args.port, data_dir, tick_time_ms=args.tick_time)
    try:
        server.start(timeout=args.start_timeout)
        print(server.connect_string, flush=True)
        while not stop.wait(_HEALTH_CHECK_S):
            if not server.running:
                print(f"metaq zookeeper: the server exited; log tail:\n{server.log_tail()}", file=sys.stderr)
                return 1
        return 0
    finally:
        server.stop()
        handler.restore()


def default_data_dir(port: int) -> Path:
    """Where a server on ``port`` keeps its data when no --data-dir is given (persistent, one per port)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "metaq" / f"zookeeper-{port}"
