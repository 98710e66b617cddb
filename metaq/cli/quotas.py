"""``metaq quotas set|list|remove``: client quotas (produce and fetch byte rates, request time) per user, per
client id or per (user, client id), like ``kafka-configs --entity-type users|clients`` (docs/quotas.md).

    metaq quotas set --client-id etl --producer-byte-rate 1048576 --zookeeper 127.0.0.1:2181
    metaq quotas set --user alice --default client-id --consumer-byte-rate 2097152 --bootstrap-server b1:9092
    metaq quotas set --default user --request-percentage 50 --zookeeper ...     # /config/users/<default>
    metaq quotas list --zookeeper 127.0.0.1:2181
    metaq quotas remove --client-id etl --quota producer_byte_rate --zookeeper ...

With ``--zookeeper`` the nodes are written as Kafka writes them, with a ``/config/changes`` notification; with
``--bootstrap-server`` a broker does it (AlterClientQuotas). Brokers apply a change within seconds, without a
restart.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from metaq.cli.output import add_parser, cell, command_security, emit, open_admin, table, usage_error
from metaq.cli.subparsers import SubParsers

if TYPE_CHECKING:  # kafka-python and kazoo: not for `metaq quotas --help`
    from metaq.admin.client import Admin
    from metaq.admin.quotas import EntityQuotas, QuotaStore
    from zk_layout.quotas import ClientQuotaEntity

# Kafka's quota keys in ZooKeeper mode (metaq.broker.quota.entities.QUOTA_KEYS, not imported: it pulls in kazoo)
KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")


def register(sub: SubParsers) -> None:
    parser = sub.add_parser("quotas", help="client quotas per user and client id (like kafka-configs "
                                           "--entity-type users|clients)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    setting = add_parser(actions, "set", "set quotas of a user, a client id or both", bootstrap=True)
    _entity_options(setting)
    for key in KEYS:
        setting.add_argument(f"--{key.replace('_', '-')}", dest=key, type=float, metavar="N",
                             help="bytes/s" if key.endswith("byte_rate") else "percent of one request thread")
    setting.set_defaults(func=_set)
    listing = add_parser(actions, "list", "quotas of every entity, or of those named", bootstrap=True)
    _entity_options(listing)
    listing.set_defaults(func=_list)
    remove = add_parser(actions, "remove", "remove quotas of an entity", bootstrap=True)
    _entity_options(remove)
    remove.add_argument("--quota", action="append", choices=KEYS, help="repeatable; default: all of them")
    remove.set_defaults(func=_remove)


def _entity_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--user", help="a user (principal name; ANONYMOUS without authentication)")
    parser.add_argument("--client-id", help="a client id")
    parser.add_argument("--default", action="append", choices=("user", "client-id"), default=[],
                        help="the default user or client id (repeatable), instead of a name")


def _store(args: argparse.Namespace) -> tuple[QuotaStore, Admin | None]:
    """The quota store the options name, and what to close after."""
    from metaq.admin.quotas import BrokerQuotas, ZkQuotas

    if args.bootstrap_server is not None:
        if args.zookeeper or args.config:
            usage_error(args, "give either --bootstrap-server or --zookeeper/--config, not both")
        from metaq.client.settings import ConnectionSettings

        return BrokerQuotas(args.bootstrap_server, ConnectionSettings(client_id="metaq-admin",
                                                                      security=command_security(args))), None
    admin = open_admin(args)
    return ZkQuotas(admin.layout), admin


def _entity(args: argparse.Namespace, *, required: bool = True) -> ClientQuotaEntity:
    from metaq.admin.quotas import entity_from_options

    if "user" in args.default and args.user is not None or "client-id" in args.default and args.client_id:
        usage_error(args, "give a name or --default for the same entity type, not both")
    entity = entity_from_options(args.user, args.client_id, args.default)
    if required and entity.user is None and entity.client_id is None:
        usage_error(args, "name an entity: --user, --client-id or --default user|client-id")
    return entity


def _run(args: argparse.Namespace, action: str) -> list[EntityQuotas]:
    from metaq.admin.quotas import filter_for
    from metaq.broker.quota.admin import QuotaOp

    entity = _entity(args, required=action != "list")
    store, closing = _store(args)
    try:
        if action == "set":
            ops = [QuotaOp(key, getattr(args, key)) for key in KEYS if getattr(args, key) is not None]
            if not ops:
                usage_error(args, "give at least one of --producer-byte-rate, --consumer-byte-rate, "
                                  "--request-percentage")
            store.alter(entity, ops)
        elif action == "remove":
            store.alter(entity, [QuotaOp(key, None) for key in args.quota or KEYS])
        return store.describe(filter_for(entity))
    finally:
        if closing is not None:
            closing.close()


def _render(found: list[EntityQuotas]) -> str:
    if not found:
        return "No client quotas."
    return table(["USER", "CLIENT-ID", *(k.upper().replace("_", "-") for k in KEYS)],
                 [(q.entity.user, q.entity.client_id, *(_number(q.values.get(k)) for k in KEYS)) for q in found])


def _number(value: float | None) -> str:
    return cell(None) if value is None else (f"{value:.0f}" if value == int(value) else f"{value:g}")


def _set(args: argparse.Namespace) -> int:
    found = _run(args, "set")
    emit(args, {"quotas": [q.to_json() for q in found]}, lambda: _render(found))
    return 0


def _list(args: argparse.Namespace) -> int:
    found = _run(args, "list")
    emit(args, {"quotas": [q.to_json() for q in found]}, lambda: _render(found))
    return 0


def _remove(args: argparse.Namespace) -> int:
    found = _run(args, "remove")
    emit(args, {"quotas": [q.to_json() for q in found]}, lambda: _render(found))
    return 0
