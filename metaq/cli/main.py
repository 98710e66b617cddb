"""Entry point of the ``metaq`` command. Exit codes: 0 ok, 1 error, 2 usage."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from metaq.errors import MetaqError

# command name -> (module under metaq.cli, one-line help). Each module exposes ``register(subparsers)`` and sets
# ``func`` on the parsers it adds. Only the module of the command being run is imported: the others (and their
# imports: the admin API, the broker, kafka-python's protocol) would cost a second or more of startup, which
# ``metaq --help`` and scripts calling ``metaq`` in a loop should not pay. tests/test_cli_startup.py checks that
# each help here is the one its module registers.
COMMANDS: dict[str, tuple[str, str]] = {
    "zookeeper": ("zookeeper", "run an embedded Apache ZooKeeper server"),
    "broker": ("broker", "run a metaq broker"),
    "topics": ("topics", "create and inspect topics"),
    "brokers": ("brokers", "the brokers' log directories (like kafka-log-dirs)"),
    "groups": ("groups", "list and describe consumer groups (lag, owners, commit times)"),
    "owners": ("owners", "owner nodes of a group, with orphans flagged"),
    "offsets": ("offsets_cmd", "reset, export and import committed offsets"),
    "recover": ("recover", "list, replay or drop messages set aside by the recover store"),
    "console-producer": ("console_producer", "send each input line as a message"),
    "console-consumer": ("console_consumer", "print a topic's messages, one value per line"),
    "demo": ("demo", "run the demo on an embedded ZooKeeper and three brokers"),
    "verifiable-consumer": ("verifiable_consumer", "a group member reporting its work as JSON lines"),
    "top": ("top", "a live view of a group: members, lag, rates, orphans and rebalances"),
    "acls": ("acls", "add, list and remove the brokers' ACLs (like kafka-acls)"),
    "users": ("users", "SCRAM users of SASL listeners (like kafka-configs --entity-type users)"),
    "quotas": ("quotas", "client quotas per user and client id (like kafka-configs --entity-type users|clients)"),
    "certs": ("certs", "make a CA, broker and client certificates for TLS (with openssl)"),
}
COMMAND_MODULES = tuple(dict.fromkeys(module for module, _ in COMMANDS.values()))

log = logging.getLogger(__name__)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser, with the full sub-parser of the command ``argv`` names (all of them when ``argv`` is None)
    and a one-line stand-in for each other command (enough for ``metaq --help`` and for usage errors)."""
    parser = argparse.ArgumentParser(prog="metaq", description="ZooKeeper-coordinated messaging: ops tools")
    parser.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    wanted = commands_to_build(argv)
    for name, (module, help_text) in COMMANDS.items():
        if name in wanted:
            importlib.import_module(f"metaq.cli.{module}").register(sub)
        else:
            sub.add_parser(name, help=help_text)
    _finish_sub_commands(parser)
    return parser


def commands_to_build(argv: Sequence[str] | None) -> set[str]:
    """Every command for None (tests walk the whole tree) or an unknown word (an abbreviated option may have
    hidden the command: argparse then sorts it out, slowly but right); none for no command (``--help``)."""
    name = None if argv is None else command_of(argv)
    if argv is not None and name is None:
        return set()
    return {name} if name in COMMANDS else set(COMMANDS)


def command_of(argv: Sequence[str]) -> str | None:
    """The command word in ``argv``: the first argument that is neither an option nor ``--log-level``'s value."""
    args = iter(argv)
    for arg in args:
        if arg == "--log-level":
            next(args, None)
        elif not arg.startswith("-"):
            return arg
    return None


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
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
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
