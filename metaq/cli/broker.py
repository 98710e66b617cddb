"""``metaq broker start --config FILE [--override key=value ...]``: run a broker until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse

from metaq.cli.subparsers import SubParsers
from metaq.errors import ConfigError


def register(sub: SubParsers) -> None:
    parser = sub.add_parser("broker", help="run a metaq broker")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    start = actions.add_parser("start", help="start a broker with a Kafka-style properties file")
    start.add_argument("--config", required=True, help="server.properties file")
    start.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="override one property"
    )
    start.set_defaults(func=_start)


def _parse_overrides(items: list[str]) -> dict[str, str]:
    result = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--override {item!r}: expected KEY=VALUE")
        result[key.strip()] = value.strip()
    return result


def _start(args: argparse.Namespace) -> int:
    import asyncio
    import gc

    from metaq.broker.config import BrokerConfig  # imported here: `metaq broker --help` needs no broker
    from metaq.broker.server import Broker
    from metaq.config import load_properties

    values = load_properties(args.config)
    values.update(_parse_overrides(args.override))
    config = BrokerConfig.from_properties(values)
    # The ~700 modules' objects live as long as the process: frozen, the collector no longer walks them in each
    # full collection nor at exit, where it cost a stopping broker about as long as its whole clean shutdown
    gc.freeze()
    asyncio.run(Broker(config, on_started=lambda line: print(line, flush=True)).run())
    return 0
