"""What every ops command shares: the connection options, tables or ``--json``, and a progress bar.

    parser = actions.add_parser("describe", parents=[common_options()])
    ...
    with open_admin(args) as admin:
        emit(args, description.to_json(), lambda: table(["TOPIC", "LAG"], rows))

Tables are for people (``-`` for an unknown value); ``--json`` prints one JSON document on stdout for
scripts. Notes and progress go to stderr, so stdout stays parseable either way.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, TextIO

from metaq.cli.subparsers import SubParsers
from metaq.errors import ConfigError

if TYPE_CHECKING:  # imported where used: they bring in kazoo and ssl, which `metaq groups --help` never needs
    from metaq.admin.client import Admin
    from metaq.client.security import SecurityConfig
    from metaq.zksecurity import ZooKeeperSecurity

Row = Sequence[object]


def common_options(*, json_output: bool = True) -> argparse.ArgumentParser:
    """A parent parser with ``--zookeeper``, ``--config``, ``--command-config``, ``--zookeeper-timeout-ms`` and
    ``--json``."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]", help="ZooKeeper connect string")
    parent.add_argument("--config", metavar="FILE",
                        help="a properties file with zookeeper.connect (e.g. the consumer's)")
    parent.add_argument("--command-config", metavar="FILE",
                        help="a properties file with how to reach the brokers, as for Kafka's tools: "
                             "security.protocol, ssl.*, sasl.* (see docs/client-security.md)")
    parent.add_argument("--zookeeper-timeout-ms", type=int, default=None, metavar="MS",
                        help="give up connecting to ZooKeeper after this long (default 6000)")
    parent.add_argument("--zk-config", "--zk-tls-config-file", dest="zk_config", metavar="FILE",
                        help="a properties file with the ZooKeeper client's security: zookeeper.auth, "
                             "zookeeper.set.acl, zookeeper.ssl.* (overrides those of --config)")
    if json_output:
        parent.add_argument("--json", action="store_true", help="print JSON for scripts instead of a table")
    return parent


def add_parser(actions: SubParsers, name: str, help_text: str,
               *, json_output: bool = True, bootstrap: bool = False) -> argparse.ArgumentParser:
    """A sub-command with the common options; it remembers itself so that usage errors can exit 2.
    ``bootstrap``: it also works with ``--bootstrap-server`` alone (brokers only, no ZooKeeper)."""
    parser: argparse.ArgumentParser = actions.add_parser(name, help=help_text, description=help_text,
                                                         parents=[common_options(json_output=json_output)])
    if bootstrap:
        parser.add_argument("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT]",
                            help="talk to the brokers only, as Kafka's tools do (no ZooKeeper: its groups and "
                                 "owners are not seen); instead of --zookeeper/--config")
    parser.set_defaults(_parser=parser)
    return parser


def usage_error(args: argparse.Namespace, message: str) -> None:
    """Exit 2 with ``message`` and the sub-command's usage, as argparse does for its own errors."""
    parser: argparse.ArgumentParser = args._parser
    parser.error(message)


def connect_string(args: argparse.Namespace) -> tuple[str, int | None]:
    """``--zookeeper`` or the config file's ``zookeeper.connect`` (exit 2 when neither is given)."""
    from metaq.admin.client import resolve_connect

    if not args.zookeeper and not args.config:
        usage_error(args, "one of --zookeeper or --config is required" if not hasattr(args, "bootstrap_server")
                    else "one of --zookeeper, --config or --bootstrap-server is required")
    quiet_libraries()
    connect, file_timeout = resolve_connect(args.zookeeper, args.config)
    return connect, args.zookeeper_timeout_ms or file_timeout


def zk_security_properties(args: argparse.Namespace) -> dict[str, str]:
    """The ``zookeeper.*`` security keys of ``--config`` overridden by those of ``--zk-config`` (all of that
    file's keys must be ZooKeeper client keys: it is about nothing else)."""
    from metaq.config import load_properties
    from metaq.zksecurity import ZOOKEEPER_CLIENT_KEYS

    picked = {k: v for k, v in (load_properties(args.config) if args.config else {}).items()
              if k in ZOOKEEPER_CLIENT_KEYS}
    if getattr(args, "zk_config", None):
        own = load_properties(args.zk_config)
        unknown = sorted(set(own) - ZOOKEEPER_CLIENT_KEYS)
        if unknown:
            raise ConfigError(f"--zk-config {args.zk_config}: {unknown[0]!r} is not a ZooKeeper client key "
                              f"(those are {', '.join(sorted(ZOOKEEPER_CLIENT_KEYS))})")
        picked.update(own)
    return picked


def zk_security(args: argparse.Namespace) -> ZooKeeperSecurity:
    from metaq.zksecurity import security_from_properties

    return security_from_properties(zk_security_properties(args))


def command_properties(args: argparse.Namespace) -> dict[str, str]:
    """The ``--command-config`` file's properties (checked: only the security keys are allowed)."""
    from metaq.client.security import SecurityConfig
    from metaq.config import load_properties

    path = getattr(args, "command_config", None)
    if not path:
        return {}
    props = load_properties(path)
    try:
        SecurityConfig.from_properties(props)
    except ConfigError as e:
        raise ConfigError(f"--command-config {path}: {e}") from e
    return props


def command_security(args: argparse.Namespace) -> SecurityConfig:
    """How this command reaches the brokers (``--command-config``; PLAINTEXT without one)."""
    from metaq.client.security import SecurityConfig

    return SecurityConfig.from_properties(command_properties(args))


def apply_overrides(props: dict[str, object], args: argparse.Namespace, timeout_ms: int | None) -> None:
    """The command line wins over the config file: ``--zookeeper-timeout-ms``, then each ``--property KEY=VALUE``."""
    if timeout_ms:
        props["zookeeper.connection.timeout.ms"] = timeout_ms
    for item in args.property:
        key, eq, value = item.partition("=")
        if not eq:
            raise ConfigError(f"--property {item!r}: expected KEY=VALUE")
        props[key.strip()] = value.strip()


def open_admin(args: argparse.Namespace) -> Admin:
    from metaq.admin.client import Admin

    security = command_security(args)  # before connecting: a bad file is reported first
    bootstrap = getattr(args, "bootstrap_server", None)
    if bootstrap is not None:
        if args.zookeeper or args.config:
            usage_error(args, "give either --bootstrap-server or --zookeeper/--config, not both")
        quiet_libraries()
        from metaq.admin.bootstrap import BootstrapLayout, as_layout

        return Admin(as_layout(BootstrapLayout.connect(bootstrap, security)), security=security)
    connect, timeout_ms = connect_string(args)
    return Admin.connect(connect, timeout_ms=timeout_ms, security=security, zk_security=zk_security(args))


def add_group_arguments(parser: argparse.ArgumentParser, *, several: bool = False) -> None:
    """The GROUP argument(s) and ``--all-groups`` (kafka-consumer-groups' option): one of them is needed."""
    parser.add_argument("group", nargs="*" if several else "?", metavar="GROUP",
                        help="the group" + ("(s)" if several else "") + " (or --all-groups)")
    parser.add_argument("--all-groups", action="store_true",
                        help="every group (those under /consumers and those the brokers coordinate)")


def chosen_groups(args: argparse.Namespace, admin: Admin) -> list[str]:
    """The groups a command applies to: those named, or with ``--all-groups`` every group ``groups list``
    shows that could be read (exit 2 for both or neither)."""
    named = check_group_arguments(args)
    if named:
        return named
    return [s.group for s in admin.group_listing().groups if s.error is None]


def check_group_arguments(args: argparse.Namespace) -> list[str]:
    """The groups named (exit 2 unless either some or ``--all-groups``), checked before connecting."""
    named: list[str] = args.group if isinstance(args.group, list) else [args.group] if args.group else []
    if bool(named) == bool(args.all_groups):
        usage_error(args, "give a GROUP or --all-groups" if not named else "give either GROUP or --all-groups")
    return named


def quiet_libraries() -> None:
    """kazoo logs every failed connection attempt as a warning; the command's own error says it once."""
    if logging.getLogger().getEffectiveLevel() > logging.INFO:
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)


# -- rendering ------------------------------------------------------------------------------------------


def cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


#: A cell longer than this is printed whole but does not widen its column for the other rows (a 32,767-character
#: group id must not push every other row's columns off the screen).
MAX_ALIGNED_WIDTH = 64


def table(headers: Sequence[str], rows: Iterable[Row]) -> str:
    """Left-aligned columns two spaces apart; the last column is not padded. Cells up to
    :data:`MAX_ALIGNED_WIDTH` characters set their column's width; a longer one overflows its own row only."""
    text_rows = [[cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in text_rows if len(r[i]) <= MAX_ALIGNED_WIDTH)])
              for i, h in enumerate(headers)]
    lines = []
    for row in [list(headers), *text_rows]:
        padded = [v.ljust(w) for v, w in zip(row[:-1], widths[:-1], strict=True)] + [row[-1]]
        lines.append("  ".join(padded).rstrip())
    return "\n".join(lines)


def print_json(document: object, out: TextIO | None = None) -> None:
    stream = out or sys.stdout
    stream.write(json.dumps(document, indent=2, sort_keys=False) + "\n")


def emit(args: argparse.Namespace, document: object, render: Callable[[], str]) -> None:
    """``document`` as JSON with ``--json``, else the table ``render`` builds."""
    if getattr(args, "json", False):
        print_json(document)
    else:
        print(render())


def note(message: str) -> None:
    print(message, file=sys.stderr)


def when(ms: int | None) -> str:
    """A commit or claim time for a table: ISO 8601 UTC to the second."""
    from metaq.admin.timefmt import format_ms

    return "-" if ms is None else format_ms(ms)[:19] + "Z"


def int_arg(text: str) -> int:
    """An argparse type for integers that may be negative (``--shift-by -100``)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer: {text!r}") from None


# -- progress ---------------------------------------------------------------------------------------------


class ProgressBar:
    """A one-line progress bar on stderr: ``importing [#######.......] 450/1000``.

    Shown only on a terminal (unless ``enabled``), and redrawn at most every ``interval_s``, so that it
    costs nothing in scripts and little in loops. ``total`` None shows a plain counter."""

    WIDTH = 30

    def __init__(self, label: str, total: int | None = None, *, stream: TextIO | None = None,
                 enabled: bool | None = None, interval_s: float = 0.1) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self._stream = stream or sys.stderr
        self._enabled = self._stream.isatty() if enabled is None else enabled
        self._interval_s = interval_s
        self._last_draw = 0.0
        self._drawn = False

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if self._enabled and (now - self._last_draw >= self._interval_s or self.done == self.total):
            self._last_draw = now
            self._draw()

    def render(self) -> str:
        if not self.total:
            return f"{self.label} {self.done}"
        filled = min(self.WIDTH, self.WIDTH * self.done // self.total)
        return f"{self.label} [{'#' * filled}{'.' * (self.WIDTH - filled)}] {self.done}/{self.total}"

    def close(self) -> None:
        if self._enabled and self._drawn:
            self._draw()
            self._stream.write("\n")
            self._stream.flush()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _draw(self) -> None:
        self._stream.write("\r" + self.render())
        self._stream.flush()
        self._drawn = True
