"""``metaq users add|list|delete``: SCRAM credentials in ZooKeeper, like ``kafka-configs --entity-type users``.

    metaq users add alice --password-file /run/secrets/alice --zookeeper 127.0.0.1:2181
    metaq users add alice --mechanism SCRAM-SHA-512 --iterations 8192 --zookeeper ...   # prompts for the password
    metaq users list --zookeeper 127.0.0.1:2181
    metaq users delete alice --zookeeper 127.0.0.1:2181

``add`` writes ``/config/users/<user>`` exactly as Kafka does (salt, stored and server keys, iterations; never
the password) with a ``/config/changes`` notification, so brokers use the new credentials for new connections
without a restart. Adding a user again changes the password. The password comes from ``--password-file`` (first
line), ``--password-env VAR``, or a prompt; ``--password`` also works but shows the password to anyone who can
list processes (ps) and lands in shell history. No command prints a password.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from metaq.cli.output import add_parser, emit, open_admin, table, usage_error
from metaq.cli.subparsers import SubParsers

if TYPE_CHECKING:  # the zk_layout package imports kazoo, which `metaq users --help` never needs
    from zk_layout import ScramCredential

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384  # Kafka's bounds for SCRAM iterations


def register(sub: SubParsers) -> None:
    parser = sub.add_parser("users", help="SCRAM users of SASL listeners (like kafka-configs --entity-type users)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = add_parser(actions, "add", "add a user or change its password (SCRAM credentials in ZooKeeper)")
    add.add_argument("user")
    add.add_argument("--mechanism", action="append", choices=MECHANISMS,
                     help="repeatable; default: both SCRAM-SHA-256 and SCRAM-SHA-512")
    add.add_argument("--iterations", type=int, default=8192, help=f"{MIN_ITERATIONS}..{MAX_ITERATIONS}")
    source = add.add_mutually_exclusive_group()
    source.add_argument("--password-file", type=Path, help="read the password from the file's first line")
    source.add_argument("--password-env", metavar="VAR", help="read the password from environment variable VAR")
    source.add_argument("--password", help="the password itself (visible in ps and shell history: prefer the"
                                           " others)")
    add.set_defaults(func=_add)
    listing = add_parser(actions, "list", "users and the SCRAM mechanisms they have credentials for")
    listing.set_defaults(func=_list)
    delete = add_parser(actions, "delete", "remove a user's SCRAM credentials")
    delete.add_argument("user")
    delete.add_argument("--mechanism", action="append", choices=MECHANISMS, help="repeatable; default: both")
    delete.set_defaults(func=_delete)


def _password(args: argparse.Namespace) -> str:
    if args.password is not None:
        password: str = args.password
    elif args.password_file is not None:
        try:
            lines = args.password_file.read_text("utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            usage_error(args, f"--password-file {args.password_file}: cannot read it ({type(e).__name__})")
        password = lines[0] if lines else ""
    elif args.password_env is not None:
        password = os.environ.get(args.password_env, "")
        if not password:
            usage_error(args, f"--password-env {args.password_env}: the variable is unset or empty")
    elif sys.stdin.isatty():
        password = getpass.getpass(f"Password for {args.user}: ")
        if getpass.getpass("Again: ") != password:
            usage_error(args, "the passwords do not match")
    else:
        usage_error(args, "no password: give --password-file, --password-env or run on a terminal")
    if not password:
        usage_error(args, "the password is empty")
    return password


def _add(args: argparse.Namespace) -> int:
    from metaq.broker.auth.scram import make_credential

    if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
        usage_error(args, f"--iterations {args.iterations}: must be in {MIN_ITERATIONS}..{MAX_ITERATIONS}")
    password = _password(args)
    mechanisms = args.mechanism or list(MECHANISMS)
    credentials: dict[str, ScramCredential | None] = {}
    for mechanism in mechanisms:
        credentials[mechanism] = make_credential(mechanism, password, args.iterations)
    with open_admin(args) as admin:
        admin.layout.set_scram_credentials(args.user, credentials)
    emit(args, {"user": args.user, "mechanisms": mechanisms, "iterations": args.iterations},
         lambda: f"Set {', '.join(mechanisms)} credentials of user {args.user} ({args.iterations} iterations)")
    return 0


def _list(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        users = {user: sorted(admin.layout.scram_credentials(user)) for user in admin.layout.users()}
    users = {user: mechs for user, mechs in users.items() if mechs}
    emit(args, {"users": [{"user": u, "mechanisms": m} for u, m in sorted(users.items())]},
         lambda: table(["USER", "MECHANISMS"], [(u, ",".join(m)) for u, m in sorted(users.items())]) if users
         else "No SCRAM users.")
    return 0


def _delete(args: argparse.Namespace) -> int:
    mechanisms = args.mechanism or list(MECHANISMS)
    with open_admin(args) as admin:
        had = set(admin.layout.scram_credentials(args.user))
        if not had & set(mechanisms):
            usage_error(args, f"user {args.user} has no {' or '.join(mechanisms)} credentials")
        admin.layout.set_scram_credentials(args.user, dict.fromkeys(mechanisms))
    emit(args, {"user": args.user, "deleted": sorted(had & set(mechanisms))},
         lambda: f"Deleted {', '.join(sorted(had & set(mechanisms)))} credentials of user {args.user}")
    return 0
