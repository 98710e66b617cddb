"""``metaq console-producer --zookeeper Z --topic T``: one message per input line (stdin or ``--input``).

    seq 1000 | metaq console-producer --zookeeper 127.0.0.1:2181 --topic clicks
    metaq console-producer --config consumer.properties --topic clicks --input lines.txt --parse-key
    seq 1000 | metaq console-producer --bootstrap-server 127.0.0.1:9092 --topic clicks   # no ZooKeeper

Like Kafka's console producer: each line (without its newline) is a value; with ``--parse-key`` the text
before the first ``--key-separator`` is the key. Producer settings go in ``--property KEY=VALUE``. Every
message is waited for: the exit code is 1 if any could not be delivered. With ``--bootstrap-server`` the
producer finds partitions and leaders with Metadata requests (metaq.client.metadata), as Kafka's does.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING

from metaq.cli.output import (
    ProgressBar,
    add_parser,
    apply_overrides,
    command_properties,
    connect_string,
    note,
    print_json,
    quiet_libraries,
    usage_error,
    zk_security_properties,
)
from metaq.cli.subparsers import SubParsers
from metaq.errors import ConfigError, MetaqError

if TYPE_CHECKING:  # the producer imports the Kafka client: `metaq console-producer --help` needs none
    from metaq.producer import Producer, RecordMetadata

_FLUSH_TIMEOUT_S = 120.0  # the producer's own request timeouts end every send well before this


def register(sub: SubParsers) -> None:
    parser = add_parser(sub, "console-producer", "send each input line as a message", bootstrap=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partition", type=int, default=None, help="send every message to this partition")
    parser.add_argument("--input", default="-", metavar="FILE", help="read lines from FILE (default stdin)")
    parser.add_argument("--parse-key", action="store_true", help="split each line into key and value")
    parser.add_argument("--key-separator", default="\t", help="with --parse-key (default: a tab)")
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                        help="producer property, e.g. acks=all or linger.ms=20")
    parser.set_defaults(func=_run)


class _Outcomes:
    """Counts acknowledged and failed sends; callbacks run on the sender thread and only count."""

    def __init__(self) -> None:
        self.acked = 0
        self.failed = 0
        self.first_error: BaseException | None = None
        self._lock = threading.Lock()

    def __call__(self, future: Future[RecordMetadata]) -> None:
        error = future.exception()
        with self._lock:
            if error is None:
                self.acked += 1
            else:
                self.failed += 1
                self.first_error = self.first_error or error


def _run(args: argparse.Namespace) -> int:
    if args.bootstrap_server is not None:
        if args.zookeeper or args.config:
            usage_error(args, "give either --bootstrap-server or --zookeeper/--config, not both")
        quiet_libraries()
        props: dict[str, object] = {"linger.ms": 5, **command_properties(args)}
        apply_overrides(props, args, None)
    else:
        connect, timeout_ms = connect_string(args)
        props = {"zookeeper.connect": connect, "linger.ms": 5, **zk_security_properties(args),
                 **command_properties(args)}
        apply_overrides(props, args, timeout_ms)
    outcomes = _Outcomes()
    sent = 0
    with _input_lines(args.input) as lines, _producer(props, args.bootstrap_server) as producer:
        with ProgressBar("producing", _count_lines(args.input)) as bar:
            for line in lines:
                key, value = _split(line.rstrip("\r\n"), args)
                producer.send(args.topic, value, key, partition=args.partition).add_done_callback(outcomes)
                sent += 1
                bar.update()
        producer.flush(_FLUSH_TIMEOUT_S)
    return _report(args, sent, outcomes)


def _producer(props: dict[str, object], bootstrap: str | None) -> Producer:
    """A producer over ZooKeeper, or (``bootstrap``) over the brokers' Metadata answers."""
    from metaq.client.metadata import MetadataLayout
    from metaq.producer import ClusterMetadata, Producer, ProducerConfig
    from metaq.producer.producer import connection_settings

    config = ProducerConfig.from_properties(props)
    if bootstrap is None:
        return Producer(config)
    settings = connection_settings(config)
    layout = MetadataLayout.connect(bootstrap, settings, option="--bootstrap-server", min_refresh_s=0.1)
    return Producer(config, metadata=ClusterMetadata(layout, settings, max_age_ms=config.metadata_max_age_ms))


def _split(line: str, args: argparse.Namespace) -> tuple[bytes | None, bytes]:
    if not args.parse_key:
        return None, line.encode("utf-8")
    key, sep, value = line.partition(args.key_separator)
    if not sep:
        raise ConfigError(f"--parse-key: line {line[:60]!r} has no key separator {args.key_separator!r}")
    return key.encode("utf-8"), value.encode("utf-8")


def _report(args: argparse.Namespace, sent: int, outcomes: _Outcomes) -> int:
    if args.json:
        print_json({"topic": args.topic, "sent": sent, "acknowledged": outcomes.acked, "failed": outcomes.failed})
    else:
        note(f"Produced {outcomes.acked} of {sent} messages to {args.topic}")
    if outcomes.failed:
        raise MetaqError(f"{outcomes.failed} of {sent} messages were not delivered; first error: "
                         f"{outcomes.first_error}")
    return 0


@contextlib.contextmanager
def _input_lines(name: str) -> Iterator[Iterator[str]]:
    """The lines of stdin (read as they come, for interactive use) or of a file."""
    if name == "-":
        yield iter(sys.stdin.readline, "")
        return
    try:
        file = open(name, encoding="utf-8")  # closed by the with below
    except OSError as e:
        raise ConfigError(f"cannot read {name}: {e.strerror or e}") from e
    with file:
        yield iter(file)


def _count_lines(name: str) -> int | None:
    """The progress bar's total: lines of a file; unknown for stdin."""
    if name == "-":
        return None
    try:
        with Path(name).open("rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except OSError:
        return None  # _input_lines reports it
