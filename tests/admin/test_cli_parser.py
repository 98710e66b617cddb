"""Every `metaq` sub-command opens its --help with a description and accepts --log-level after its name."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from metaq.cli.main import build_parser

Leaf = tuple[tuple[str, ...], argparse.ArgumentParser]


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[Leaf]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for action in subs:
        for name, child in action.choices.items():
            yield from _leaves(child, (*path, name))


def test_every_command_has_a_description_line() -> None:
    leaves = list(_leaves(build_parser()))
    assert len(leaves) >= 15
    missing = [" ".join(path) for path, parser in leaves if not parser.description]
    assert missing == []


def test_log_level_is_accepted_after_the_sub_command() -> None:
    args = build_parser().parse_args(["groups", "list", "--zookeeper", "z:1", "--log-level", "DEBUG"])
    assert args.log_level == "DEBUG"
    assert build_parser().parse_args(["groups", "list", "--zookeeper", "z:1"]).log_level == "WARNING"
    before = build_parser().parse_args(["--log-level", "INFO", "groups", "list", "--zookeeper", "z:1"])
    assert before.log_level == "INFO"
