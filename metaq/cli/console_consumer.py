"""``metaq console-consumer``: print a topic's messages, one value per line.

    metaq console-consumer --zookeeper Z --topic T --group G [--from-beginning]    # a group member
    metaq console-consumer --zookeeper Z --topic T --partition 2 --offset 1200     # one partition, no group
    metaq console-consumer --zookeeper Z --include 'logs[.].*' --format '%t %p %o %k %s\\n'   # kcat -f
    metaq console-consumer --bootstrap-server B --topic T --group G     # broker-coordinated, no ZooKeeper

Like Kafka's console consumer. With a group it is a member like any other (it registers, owns partitions
and commits offsets); without ``--group`` a fresh ``console-consumer-<n>`` group is used. With
``--bootstrap-server`` instead of ZooKeeper it is a broker-coordinated member (``group.coordination=kafka``:
JoinGroup, offsets at the group's coordinator, leaders from Metadata), as Kafka's console consumer is. With
``--partition`` it reads that partition from ``--offset`` (a number, ``earliest`` or ``latest``, the
default) without any group: nothing is registered or committed. ``--json`` prints one JSON object per
message (key and value decoded as UTF-8, invalid bytes replaced).

``--isolation-level read_committed`` shows only committed transactions' messages, as Kafka's option does.
``--include REGEX`` reads every topic the regex matches, now and later (a whitelist subscription, as Kafka's
``--include``). ``--format`` prints each message as kcat's ``-f`` does (docs/ops-cli-parity.md §5).
Exit codes as Kafka's console consumer (ConsoleConsumer.process): 0 after ``--max-messages``, after
``--timeout-ms`` without a message and when stdout is closed (it says so on stderr); 1 on an error.

SIGTERM and Ctrl-C stop it cleanly, like Kafka's shutdown hook: the messages already fetched for the chunk in
hand are printed, their offsets committed, the partitions released and the group left, then it exits with
the signal's status, 143 (SIGTERM) or 130 (SIGINT), as Kafka's console consumer does (the JVM exits with
128 + the signal after its shutdown hooks ran); a second signal exits at once (metaq.signals).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from metaq.cli.output import (
    add_parser,
    apply_overrides,
    command_properties,
    command_security,
    connect_string,
    quiet_libraries,
    usage_error,
    zk_security,
    zk_security_properties,
)
from metaq.cli.subparsers import SubParsers
from metaq.config import load_properties
from metaq.errors import ConfigError, MetaqError

if TYPE_CHECKING:  # imported where used: `metaq console-consumer --help` needs no client, consumer or kazoo
    from metaq.client.security import SecurityConfig
    from metaq.zksecurity import ZooKeeperSecurity
    from zk_layout import ZkLayout

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class Printed:
    """One message as the formatters see it."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()


def register(sub: SubParsers) -> None:
    parser = add_parser(sub, "console-consumer", "print a topic's messages, one value per line")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--topic")
    source.add_argument("--include", "--whitelist", dest="include", metavar="REGEX",
                        help="every topic this regex matches (Java regex rules, whole name), as Kafka's --include")
    parser.add_argument("--group", default=None)
    parser.add_argument("--from-beginning", action="store_true", help="start at the earliest offset "
                        "when the group has no committed offset (with --partition: --offset earliest)")
    parser.add_argument("--partition", type=int, default=None, help="read only this partition, without a group")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT]",
                        help="the brokers alone, without ZooKeeper: a group member is broker-coordinated "
                             "(group.coordination=kafka); with --partition its leader comes from Metadata")
    parser.add_argument("--offset", default=None, metavar="N|earliest|latest",
                        help="with --partition: where to start (default latest)")
    parser.add_argument("--isolation-level", choices=("read_uncommitted", "read_committed"), default=None,
                        help="read_committed: only committed transactions' messages, up to the last stable "
                             "offset; read_uncommitted (default): every data message. Transaction markers are "
                             "never printed (docs/transactions.md §4)")
    parser.add_argument("--print-key", action="store_true", help="print key<TAB>value")
    parser.add_argument("--max-messages", type=int, default=-1)
    parser.add_argument("--timeout-ms", type=int, default=-1, help="exit after this long without a message")
    parser.add_argument("--format", dest="kcat_format", metavar="FMT",
                        help="kcat's -f format: %%t topic, %%p partition, %%o offset, %%T timestamp, %%k key, "
                             "%%K key length, %%s value, %%S value length, %%h headers, %%%% and \\n \\t \\r")
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                        help="a formatter property as Kafka's console consumer takes (print.timestamp, "
                             "print.partition, print.offset, print.key, print.value, key.separator), or a "
                             "consumer property (group mode), e.g. auto.commit.interval.ms=500; "
                             "broker.version.fallback (Kafka 0.8/0.9 brokers) also with --partition")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if args.partition is None and args.offset is not None:
        usage_error(args, "--offset needs --partition")
    if args.partition is not None and args.group is not None:
        usage_error(args, "--partition reads without a group; do not combine it with --group")
    if args.partition is not None and args.partition < 0:
        usage_error(args, f"--partition {args.partition}: must be >= 0")
    if args.partition is not None and args.topic is None:
        usage_error(args, "--partition needs --topic (not --include)")
    if args.bootstrap_server is not None and args.include is not None:
        usage_error(args, "--include needs --zookeeper or --config: with --bootstrap-server the member is "
                          "broker-coordinated and subscribes to a named --topic")
    if args.bootstrap_server is not None and (args.zookeeper or args.config):
        usage_error(args, "give either --bootstrap-server or --zookeeper/--config, not both")
    from metaq.admin import LATEST
    from metaq.signals import TerminationHandler

    start = _start_offset(args) if args.partition is not None else LATEST
    args.formatter = _formatter(args)
    if args.kcat_format is not None:
        if args.formatter is not None or args.json or args.print_key:
            usage_error(args, "--format decides the whole line: no --json, --print-key or print.* properties")
        try:
            args.formatter = KcatFormat.parse(args.kcat_format)
        except ConfigError as e:
            usage_error(args, str(e))
    count = 0
    stop = _StopRequest()
    with TerminationHandler(stop.request) as signals:
        messages = _fixed_partition(args, start, stop) if args.partition is not None else _group_member(args, stop)
        try:
            for message in messages:
                _print(message, args)
                count += 1
                if 0 <= args.max_messages <= count:
                    break
        except BrokenPipeError:
            print("Unable to write to standard out, closing consumer.", file=sys.stderr)  # Kafka's words
        finally:
            messages.close()  # leaves the group (committing what was printed) before the summary line
            sys.stdout.flush()
    print(f"Processed a total of {count} messages", file=sys.stderr)
    # as Kafka's console consumer under the JVM: the clean stop above, then the signal's status (128 + n)
    return 128 + signals.received if signals.received is not None else 0


class _StopRequest:
    """Set by the first SIGTERM/SIGINT; runs the stop action of whatever is reading at that moment."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requested = False
        self._action: Callable[[], None] | None = None

    def request(self) -> None:
        with self._lock:
            self.requested = True
            action = self._action
        if action is not None:
            action()

    def on_request(self, action: Callable[[], None]) -> None:
        """Run ``action`` when a stop is requested (at once if it already was)."""
        with self._lock:
            self._action = action
            already = self.requested
        if already:
            action()


def _start_offset(args: argparse.Namespace) -> int:
    from metaq.admin import EARLIEST, LATEST

    text = args.offset or ("earliest" if args.from_beginning else "latest")
    if text in ("earliest", "latest"):
        return EARLIEST if text == "earliest" else LATEST
    if not (text.isascii() and text.isdigit()):
        usage_error(args, f"--offset {text!r}: a non-negative number, 'earliest' or 'latest'")
    return int(text)


def _fixed_partition(args: argparse.Namespace, start: int, stop: _StopRequest) -> Generator[Printed, None, None]:
    from metaq.zkclient import session
    from zk_layout import ZkLayout

    security = command_security(args)
    fallback = _fallback_property(args)
    if args.bootstrap_server is not None:  # the brokers' Metadata names the leaders (metaq/admin/bootstrap.py)
        from metaq.admin.bootstrap import BootstrapLayout, as_layout

        quiet_libraries()
        layout = as_layout(BootstrapLayout.connect(args.bootstrap_server, security, broker_version_fallback=fallback))
        yield from _read_partition(layout, args, start, stop, security)
        return
    connect, timeout_ms = connect_string(args)
    with session(connect, connection_timeout_ms=timeout_ms or 6000, security=zk_security(args)) as client:
        yield from _read_partition(ZkLayout(client), args, start, stop, security)


def _read_partition(layout: ZkLayout, args: argparse.Namespace, start: int, stop: _StopRequest,
                    security: SecurityConfig) -> Generator[Printed, None, None]:
    from metaq.admin import PartitionReader
    from metaq.admin.reader import ISOLATION_LEVELS

    idle = args.timeout_ms / 1000 if args.timeout_ms >= 0 else None
    level = ISOLATION_LEVELS[args.isolation_level or "read_uncommitted"]
    with PartitionReader(layout, args.topic, args.partition, start, security=security, isolation_level=level,
                         broker_version_fallback=_fallback_property(args)) as reader:
        for offset, timestamp, key, value, headers in reader.records(
                idle_timeout_s=idle, should_stop=lambda: stop.requested):
            yield Printed(args.topic, args.partition, offset, timestamp, key, value, tuple(headers or ()))


def _fallback_property(args: argparse.Namespace) -> str:
    """``--property broker.version.fallback=R`` (Kafka 0.8/0.9 brokers, docs/legacy-wire.md): the one consumer
    property that reading one partition without a group takes; the default otherwise."""
    from metaq.client.versions import DEFAULT_FALLBACK, fallback_release

    release = DEFAULT_FALLBACK
    for item in args.property:
        key, eq, value = item.partition("=")
        if eq and key.strip() == "broker.version.fallback":
            release = value.strip()
    if (problem := fallback_release(release)) is not None:
        usage_error(args, f"--property broker.version.fallback={release}: {problem}")
    return release


def _group_member(args: argparse.Namespace, stop: _StopRequest) -> Generator[Printed, None, None]:
    """A group member over ZooKeeper, or (``--bootstrap-server``) a broker-coordinated one that finds leaders
    with Metadata requests (docs/broker-coordinated-consumer.md). A generated group is deleted at exit in
    ZooKeeper; with the brokers, as Kafka's ConsoleConsumerOptions, it commits nothing unless told
    (``auto.commit.enable``), so that nothing is left behind."""
    from metaq.consumer import Consumer, ConsumerConfig, ConsumerTimeoutError, Whitelist

    connect: str | None = None
    timeout_ms: int | None = None
    props: dict[str, Any] = {}
    if args.bootstrap_server is not None:
        quiet_libraries()
        props.update({**command_properties(args), "bootstrap.servers": args.bootstrap_server,
                      "group.coordination": "kafka"})
    else:
        connect, timeout_ms = connect_string(args)
        props.update(load_properties(args.config) if args.config else {})
        props.update(zk_security_properties(args))
        props.update(command_properties(args))
        props["zookeeper.connect"] = connect
    props["consumer.timeout.ms"] = args.timeout_ms
    props.setdefault("auto.commit.interval.ms", 1000)
    props.setdefault("auto.offset.reset", "largest")
    if args.group:
        props["group.id"] = args.group
    if args.from_beginning:
        props["auto.offset.reset"] = "smallest"
    if args.isolation_level is not None:  # as Kafka's option, it wins over --property isolation.level
        props["isolation.level"] = args.isolation_level
    apply_overrides(props, args, timeout_ms)
    generated = "group.id" not in props
    if generated and connect is None:
        props.setdefault("auto.commit.enable", False)
    props.setdefault("group.id", f"console-consumer-{random.randrange(100000)}")
    try:
        with Consumer(ConsumerConfig.from_properties(props)) as consumer:
            if args.include is not None:
                [stream] = consumer.create_message_streams_by_filter(Whitelist(args.include), 1)
            else:
                [stream] = consumer.create_message_streams({args.topic: 1})[args.topic]
            stop.on_request(consumer.stop_streams)
            try:
                for m in stream:
                    yield Printed(m.topic, m.partition, m.offset, m.timestamp, m.key, m.value, m.headers)
            except ConsumerTimeoutError:
                return
    finally:
        if generated and connect is not None:
            _delete_generated_group(connect, props["group.id"], timeout_ms, zk_security(args))


def _delete_generated_group(connect: str, group: str, timeout_ms: int | None,
                            security: ZooKeeperSecurity) -> None:
    """A group nobody named is nobody's to resume: remove it on exit, as Kafka 0.8's console consumer did,
    so that ``metaq groups list`` does not fill up with console-consumer-NNNNN."""
    from metaq.zkclient import session
    from zk_layout import ZkLayout

    try:
        with session(connect, connection_timeout_ms=timeout_ms or 6000, security=security) as client:
            ZkLayout(client).delete_group(group)
    except MetaqError as e:
        print(f"metaq console-consumer: could not delete the generated group {group}: {e}", file=sys.stderr)


FORMATTER_FLAGS = ("print.timestamp", "print.partition", "print.offset", "print.key", "print.value")


@dataclass(frozen=True)
class Formatter:
    """Kafka's console consumer's DefaultMessageFormatter properties: which fields a line shows, in Kafka's
    order (CreateTime:<ms>, Partition:<p>, Offset:<o>, key, value), joined by ``key.separator`` (a tab)."""

    timestamp: bool = False
    partition: bool = False
    offset: bool = False
    key: bool = False
    value: bool = True
    separator: str = "\t"

    def line(self, partition: int, offset: int, timestamp: int, key: bytes | None, value: bytes | None) -> str:
        fields = [(self.timestamp, f"CreateTime:{timestamp}"), (self.partition, f"Partition:{partition}"),
                  (self.offset, f"Offset:{offset}"), (self.key, _text(key) or "null"),
                  (self.value, _text(value) or "null")]
        return self.separator.join(text for shown, text in fields if shown)


def _formatter(args: argparse.Namespace) -> Formatter | None:
    """Take the formatter's keys out of ``--property`` (the rest are consumer properties); None without any."""
    found: dict[str, str] = {}
    rest = []
    for item in args.property:
        key, eq, value = item.partition("=")
        if eq and key.strip() in (*FORMATTER_FLAGS, "key.separator"):
            found[key.strip()] = value.strip() if key.strip() != "key.separator" else value
        else:
            rest.append(item)
    args.property = rest
    if not found:
        return None
    flags = {}
    for name in FORMATTER_FLAGS:
        text = found.get(name, "true" if name == "print.value" else "false").lower()
        if text not in ("true", "false"):
            usage_error(args, f"--property {name}={found[name]}: must be true or false")
        flags[name.removeprefix("print.")] = text == "true"
    flags["key"] = flags["key"] or bool(args.print_key)
    return Formatter(**flags, separator=found.get("key.separator", "\t"))


_KCAT_FIELDS: dict[str, Callable[[Printed], str]] = {
    "t": lambda m: m.topic, "p": lambda m: str(m.partition), "o": lambda m: str(m.offset),
    "T": lambda m: str(m.timestamp), "k": lambda m: _text(m.key) or "", "s": lambda m: _text(m.value) or "",
    "K": lambda m: str(-1 if m.key is None else len(m.key)),
    "S": lambda m: str(-1 if m.value is None else len(m.value)),
    "h": lambda m: ",".join(f"{k}={_text(v) or ''}" for k, v in m.headers), "%": lambda m: "%",
}
_KCAT_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


@dataclass(frozen=True)
class KcatFormat:
    """kcat's ``-f`` output format: literal text and ``%`` fields; no line break unless the format has one
    (as kcat). The fields are kcat's (a NULL key or value prints empty; its length -1)."""

    parts: tuple[str | Callable[[Printed], str], ...]

    @classmethod
    def parse(cls, fmt: str) -> KcatFormat:
        parts: list[str | Callable[[Printed], str]] = []
        i = 0
        while i < len(fmt):
            char = fmt[i]
            if char in "%\\" and i + 1 < len(fmt):
                table: dict[str, Any] = _KCAT_FIELDS if char == "%" else _KCAT_ESCAPES
                if fmt[i + 1] not in table:
                    raise ConfigError(f"--format {fmt!r}: unknown {char}{fmt[i + 1]} (see --help)")
                parts.append(table[fmt[i + 1]])
                i += 2
            else:
                parts.append(char)
                i += 1
        return cls(tuple(parts))

    def render(self, message: Printed) -> str:
        return "".join(p if isinstance(p, str) else p(message) for p in self.parts)


def _print(message: Printed, args: argparse.Namespace) -> None:
    formatter: Formatter | KcatFormat | None = getattr(args, "formatter", None)
    if isinstance(formatter, KcatFormat):
        sys.stdout.write(formatter.render(message))
        return
    topic, partition, offset, timestamp, key, value = (message.topic, message.partition, message.offset,
                                                       message.timestamp, message.key, message.value)
    if formatter is not None and not args.json:
        sys.stdout.write(formatter.line(partition, offset, timestamp, key, value) + "\n")
        return
    if args.json:
        line = json.dumps({"topic": topic, "partition": partition, "offset": offset, "timestamp": timestamp,
                           "key": _text(key), "value": _text(value)})
    elif args.print_key:
        line = f"{_text(key) or ''}\t{_text(value) or ''}"
    else:
        line = _text(value) or ""
    sys.stdout.write(line + "\n")


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "replace")
