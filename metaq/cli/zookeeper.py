"""``metaq zookeeper start [--port P] [--data-dir D] [--tick-time MS]``: run a real ZooKeeper in the foreground.

Security (docs/zookeeper-layout.md): ``--super-digest digest:USER:HASH`` (an admin who passes every ACL),
``--enforce-auth`` (sessions must authenticate with digest first), ``--tls-keystore PEM --tls-truststore PEM
[--tls-client-auth need]`` (a TLS client port, printed on stderr). ``metaq zookeeper digest USER`` reads the
password on stdin and prints the ``digest:USER:HASH`` identity that ``--super-digest`` and
``zookeeper.acl.ops.identity`` take.

Once serving it prints one line, ``metaq zookeeper serving 127.0.0.1:2181 (client port 2181; data in DIR)``, on
a terminal; when stdout is not one, the connect string alone goes to stdout (so that scripts can read it) and
that line to stderr. It runs until SIGINT or SIGTERM, then stops the server cleanly. The data must outlive the
server, or a restart forgets every topic and committed offset while the brokers keep their logs: with
``--port P`` and no ``--data-dir`` it lives in ``$XDG_DATA_HOME/metaq/zookeeper-P`` (default
``~/.local/share/...``); with neither (a throwaway server on a free port) in a temporary directory removed at
exit, which the line says.
"""

from __future__ import annotations

import argparse
import getpass
import logging
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from metaq.cli.subparsers import SubParsers
from metaq.errors import ConfigError

if TYPE_CHECKING:  # imported where used: `metaq zookeeper --help` needs neither the server nor kazoo
    from metaq.zkserver import ZooKeeperServer, ZooKeeperTls

log = logging.getLogger(__name__)

_HEALTH_CHECK_S = 1.0  # how often we look whether the JVM died on its own


def register(sub: SubParsers) -> None:
    parser = sub.add_parser("zookeeper", help="run an embedded Apache ZooKeeper server")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    start = actions.add_parser("start", help="start a standalone server on 127.0.0.1 and run until Ctrl-C")
    start.add_argument("--port", type=int, default=None, help="client port (default: a free port)")
    start.add_argument("--data-dir", type=Path, default=None,
                       help="data directory (default with --port P: $XDG_DATA_HOME/metaq/zookeeper-P; "
                            "without --port: temporary)")
    start.add_argument("--tick-time", type=int, default=2000, metavar="MS", help="tickTime in ms (default 2000)")
    start.add_argument("--start-timeout", type=float, default=60.0, metavar="S", help=argparse.SUPPRESS)
    start.add_argument("--super-digest", metavar="digest:USER:HASH", default=None,
                       help="a super user who passes every znode ACL (the identity `metaq zookeeper digest` prints)")
    start.add_argument("--enforce-auth", action="store_true",
                       help="refuse sessions that have not authenticated (digest) before their first request")
    start.add_argument("--tls-keystore", type=Path, metavar="PEM", default=None,
                       help="also serve TLS on a second port, with this PEM certificate and key")
    start.add_argument("--tls-truststore", type=Path, metavar="PEM", default=None,
                       help="PEM CA certificates client certificates must chain to (with --tls-keystore)")
    start.add_argument("--tls-client-auth", choices=("none", "want", "need"), default="none",
                       help="client certificates: none (default), want or need")
    start.set_defaults(func=_start)
    digest = actions.add_parser("digest", help="print the digest identity of USER (the password is read on stdin)")
    digest.add_argument("user")
    digest.set_defaults(func=_digest)


def _start(args: argparse.Namespace) -> int:
    from metaq.signals import TerminationHandler
    from metaq.zkserver import ZooKeeperServer

    stop = threading.Event()
    handler = TerminationHandler(stop.set).install()  # a second signal exits at once (the JVM dies with us)
    data_dir = args.data_dir or (default_data_dir(args.port) if args.port is not None else None)
    server = ZooKeeperServer(args.port, data_dir, tick_time_ms=args.tick_time, super_digest=args.super_digest,
                             enforce_auth=args.enforce_auth, tls=_tls(args))
    try:
        server.start(timeout=args.start_timeout)
        line = serving_line(server, temporary=data_dir is None)
        if sys.stdout.isatty():  # a person: the one line says it all
            print(line, flush=True)
        else:  # a script reads the connect string from stdout; the line goes to stderr
            print(server.connect_string, flush=True)
            print(line, file=sys.stderr, flush=True)
        if server.tls is not None:
            print(f"metaq zookeeper: TLS client port {server.secure_connect_string}", file=sys.stderr, flush=True)
        while not stop.wait(_HEALTH_CHECK_S):
            if not server.running:
                print(f"metaq zookeeper: the server exited; log tail:\n{server.log_tail()}", file=sys.stderr)
                return 1
        return 0
    finally:
        server.stop()
        handler.restore()


def serving_line(server: ZooKeeperServer, *, temporary: bool) -> str:
    """What the server serves and where its data lives, as the broker's serving line says it."""
    where = f"{server.data_dir} (temporary: removed at exit; give --port or --data-dir to keep it)" if temporary \
        else str(server.data_dir)
    tls = f", TLS {server.secure_connect_string}" if server.tls is not None else ""
    return f"metaq zookeeper serving {server.connect_string} (client port {server.port}{tls}; data in {where})"


def _tls(args: argparse.Namespace) -> ZooKeeperTls | None:
    if args.tls_keystore is None and args.tls_truststore is None:
        return None
    if args.tls_keystore is None or args.tls_truststore is None:
        raise ConfigError("--tls-keystore and --tls-truststore go together")
    from metaq.zkserver import ZooKeeperTls

    for option, path in (("--tls-keystore", args.tls_keystore), ("--tls-truststore", args.tls_truststore)):
        if not path.is_file():
            raise ConfigError(f"{option} {path}: not a readable file")
    return ZooKeeperTls(args.tls_keystore, args.tls_truststore, args.tls_client_auth)


def _digest(args: argparse.Namespace) -> int:
    """Print ``digest:USER:HASH``; the password comes from stdin (first line) so it is not in the shell history."""
    password = (getpass.getpass(f"password for {args.user}: ") if sys.stdin.isatty()
                else sys.stdin.readline().rstrip("\r\n"))
    if not password:
        raise ConfigError("no password given on stdin")
    from zk_layout.znode_acls import digest_identity

    print(digest_identity(args.user, password))
    return 0


def default_data_dir(port: int) -> Path:
    """Where a server on ``port`` keeps its data when no --data-dir is given (persistent, one per port)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "metaq" / f"zookeeper-{port}"
