"""``metaq`` starts fast by importing only the module of the command it runs (metaq/cli/main.py): ``--help``
imports no command module, and a ZooKeeper-only command does not import the Kafka client libraries. Checked by
what gets imported (the time itself is measured, not asserted: see the commit messages' figures)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from metaq.cli.main import COMMANDS, build_parser

HEAVY = ("kafka", "aiokafka", "metaq.admin.groups", "metaq.client.cluster", "metaq.consumer", "metaq.broker.server",
         "rich")
# what no command's --help needs: the client libraries, ZooKeeper's client (and ssl, which it brings), Spark, the
# broker, the consumer and producer, the admin API and the ZooKeeper schema (it imports kazoo)
HELP_HEAVY = HEAVY + ("kazoo", "confluent_kafka", "pyspark", "ssl", "metaq.broker", "metaq.admin", "metaq.client",
                      "metaq.producer", "metaq.zkserver", "metaq.zkclient", "zk_layout")


def _imported_by(*argv: str) -> list[str]:
    probe = ("import json, sys\nfrom metaq.cli.main import main\ntry:\n    main(sys.argv[1:])\n"
             "except SystemExit:\n    pass\nprint(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=120)
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def _heavy(modules: list[str], heavy: tuple[str, ...] = HEAVY) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in heavy)]


def test_help_imports_no_command_module() -> None:
    modules = _imported_by("--help")
    assert [m for m in modules if m.startswith("metaq.cli.") and m != "metaq.cli.main"] == []
    assert _heavy(modules) == []


@pytest.mark.parametrize("argv", [["topics", "list", "--help"], ["acls", "list", "--help"],
                                  ["certs", "create", "--help"], ["groups", "--help"],
                                  ["groups", "describe", "--help"], ["offsets", "reset", "--help"],
                                  ["offsets", "export", "--help"]])
def test_zookeeper_only_commands_do_not_import_the_kafka_clients(argv: list[str]) -> None:
    assert _heavy(_imported_by(*argv)) == []


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_commands_help_imports_nothing_heavy(command: str) -> None:
    """``metaq COMMAND --help`` builds the command's parser only: its module imports what running needs in
    the functions that run (metaq/cli/groups.py shows the pattern)."""
    modules = _imported_by(command, "--help")
    assert f"metaq.cli.{COMMANDS[command][0]}" in modules
    assert _heavy(modules, HELP_HEAVY) == []


def test_the_command_table_says_what_each_module_registers() -> None:
    parser = build_parser()  # every module registered
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    registered = {choice.dest: choice.help for choice in sub._choices_actions}
    assert registered == {name: help_text for name, (_, help_text) in COMMANDS.items()}


def test_the_offsets_command_knows_the_export_formats() -> None:
    """metaq/cli/offsets_cmd.py names the formats itself (importing metaq.admin.transfer would load the clients)."""
    from metaq.admin.transfer import FORMATS
    from metaq.cli.offsets_cmd import FORMATS as CLI_FORMATS

    assert CLI_FORMATS == FORMATS


def test_the_topics_command_knows_the_topic_configs() -> None:
    """metaq/cli/topics.py names the keys itself for --help (importing metaq.broker.topic_config would load the
    broker's log package)."""
    from metaq.broker.topic_config import TOPIC_CONFIG_KEYS
    from metaq.cli.topics import TOPIC_CONFIG_NAMES

    assert TOPIC_CONFIG_NAMES == tuple(TOPIC_CONFIG_KEYS)


def test_the_acls_command_knows_the_operations() -> None:
    """metaq/cli/acls.py names the operations itself for --help (the zk_layout package imports kazoo)."""
    from metaq.cli.acls import OPERATION_NAMES
    from zk_layout.acl_formats import AclOperation

    assert OPERATION_NAMES == tuple(op.kafka_name for op in AclOperation if op.value > 1)
