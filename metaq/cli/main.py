"""Entry point of the ``metaq`` command. Exit codes: 0 ok, 1 error, 2 usage."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from metaq.errors import MetaqError

# Each module exposes ``register(subparsers)`` and sets ``func`` on the parsers it adds.
COMMAND_MODULES = ("zookeeper", "broker", "topics", "groups", "owners", "offsets", "recover", "console_producer",
                   "console_consumer", "demo", "verifiable_consumer", "top", "acls", "users", "certs")

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="metaq", description="ZooKeeper-coordinated messaging: ops tools")
    parser.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"metaq.cli.{name}").register(sub)
    _finish_sub_commands(parser)
    return parser


def _finish_sub_commands(parser: argparse.ArgumentParser) -> None:
    """What every sub-command gets without each module repeating it: ``--help`` opens with a description
    line (its one-line help), and ``--log-level`` is accepted after the sub-command too."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help for choice in action._choices_actions}
        for name, child in action.choices.items():
            if child.description is None and helps.get(name):
                child.description = helps[name]
            if not any("--log-level" in a.option_strings for a in child._actions):
                child.add_argument("--log-level", default=argparse.SUPPRESS, help="logging level (default WARNING)")
            _finish_sub_commands(child)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
        format="%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except MetaqError as e:
        print(f"metaq {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
