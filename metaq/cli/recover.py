"""``metaq recover list|replay|drop``: the messages a retry-then-skip listener set aside in its recover store.

    metaq recover list [--dir DIR] [--topic T] [--group G]
    metaq recover replay --topic T --group G --to-topic T2 --zookeeper Z     # re-produce, then remove
    metaq recover drop --topic T --group G (--all | --id ID ...)

The store directory is ``--dir``, else ``metaq.recover.dir`` from ``--config``, else ``~/.metaq_recover``
(the consumer's default). A replay re-produces each entry (key, value, headers) to ``--to-topic`` and
removes it once the broker acknowledged it; naming the target explicitly is required because producing to
the original topic redelivers the message to *every* group that reads it. Entries whose send fails stay,
with their attempt count raised; dead entries are replayed only with ``--include-dead``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from metaq.cli.output import add_parser, connect_string, emit, note, table, when, zk_security_properties
from metaq.cli.subparsers import SubParsers
from metaq.config import load_properties
from metaq.errors import ConfigError, MetaqError, StorageError
from metaq.json_types import JsonObject

if TYPE_CHECKING:  # the consumer and producer packages import the Kafka client: `metaq recover --help` needs none
    from metaq.consumer.message import MessageAndMetadata
    from metaq.consumer.recover import RecoverEntry, RecoverStore

_SEND_TIMEOUT_S = 60.0  # per entry; the producer's own retries end well before this


def register(sub: SubParsers) -> None:
    parser = sub.add_parser("recover", help="list, replay or drop messages set aside by the recover store")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = _store_parser(actions, "list", "list the entries of every store (or of --topic/--group)")
    listing.add_argument("--topic", default=None)
    listing.add_argument("--group", default=None)
    listing.set_defaults(func=_list)
    replay = _store_parser(actions, "replay", "re-produce a store's entries to --to-topic, removing each sent one")
    _add_store_name(replay)
    replay.add_argument("--to-topic", required=True, help="where to produce them (may be the original topic)")
    replay.add_argument("--include-dead", action="store_true", help="replay entries marked dead too")
    replay.add_argument("--max-attempts", type=int, default=20,
                        help="mark an entry dead after this many failed replays (default 20)")
    replay.set_defaults(func=_replay)
    drop = _store_parser(actions, "drop", "remove entries for good")
    _add_store_name(drop)
    which = drop.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="every entry of the store")
    which.add_argument("--id", action="append", default=None, help="one entry (repeatable)")
    drop.set_defaults(func=_drop)


def _store_parser(actions: SubParsers, name: str,
                  help_text: str) -> argparse.ArgumentParser:
    parser = add_parser(actions, name, help_text)
    parser.add_argument("--dir", default=None, help="the recover directory (metaq.recover.dir)")
    return parser


def _add_store_name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)


def recover_dir(args: argparse.Namespace) -> Path:
    from metaq.consumer.recover import default_dir

    if args.dir:
        return default_dir(args.dir)
    configured = load_properties(args.config).get("metaq.recover.dir") if args.config else None
    return default_dir(configured)


def _open_existing(args: argparse.Namespace) -> RecoverStore:
    """Open a store that exists; opening a missing one would create it, which no ops command should do."""
    from metaq.consumer.recover import RecoverStore, recover_stores, store_name

    directory = recover_dir(args)
    name = store_name(args.topic, args.group)
    if (args.topic, args.group) not in recover_stores(directory):
        raise StorageError(f"no recover store {name} in {directory}")
    return RecoverStore.open(directory, args.topic, args.group)


# -- list ---------------------------------------------------------------------------------------------------


def _list(args: argparse.Namespace) -> int:
    from metaq.consumer.recover import RecoverStore, recover_stores

    directory = recover_dir(args)
    stores = [(t, g) for t, g in recover_stores(directory)
              if args.topic in (None, t) and args.group in (None, g)]
    entries: list[tuple[str, RecoverEntry]] = []
    for topic, group in stores:
        with RecoverStore.open(directory, topic, group) as store:
            entries += [(group, e) for e in store.list(include_dead=True)]
    emit(args, {"dir": str(directory), "stores": [{"topic": t, "group": g} for t, g in stores],
                "entries": [_entry_json(g, e) for g, e in entries]},
         lambda: _render_list(directory, stores, entries))
    return 0


def _render_list(directory: Path, stores: list[tuple[str, str]], entries: list[tuple[str, RecoverEntry]]) -> str:
    if not stores:
        return f"No recover stores in {directory}."
    rows = [(f"{e.topic}@{g}", e.id, e.partition, e.offset, e.attempts, e.dead, when(e.stored_at_ms),
             _short(e.last_error)) for g, e in entries]
    head = f"{len(entries)} entries in {len(stores)} store(s) in {directory}"
    return head + ("\n\n" + table(["STORE", "ID", "PARTITION", "OFFSET", "ATTEMPTS", "DEAD", "STORED", "LAST-ERROR"],
                                  rows) if rows else "")


def _entry_json(group: str, e: RecoverEntry) -> JsonObject:
    return {"group": group, "topic": e.topic, "id": e.id, "partition": e.partition, "offset": e.offset,
            "timestamp": e.timestamp, "key": _text(e.key), "value": _text(e.value), "attempts": e.attempts,
            "dead": e.dead, "stored_at_ms": e.stored_at_ms, "last_error": e.last_error}


def _short(text: str, limit: int = 60) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "replace")


# -- replay and drop ------------------------------------------------------------------------------------------


def _replay(args: argparse.Namespace) -> int:
    from metaq.consumer.recover import store_name
    from metaq.producer import Producer

    if args.max_attempts < 1:
        raise ConfigError(f"--max-attempts {args.max_attempts}: must be >= 1")
    connect, timeout_ms = connect_string(args)
    props: dict[str, object] = {"zookeeper.connect": connect, "linger.ms": 0, **zk_security_properties(args)}
    if timeout_ms:
        props["zookeeper.connection.timeout.ms"] = timeout_ms
    with _open_existing(args) as store, Producer(props) as producer:
        def send(message: MessageAndMetadata) -> None:
            producer.send(args.to_topic, message.value, message.key,
                          headers=list(message.headers)).result(_SEND_TIMEOUT_S)

        result = store.replay(send, max_attempts=args.max_attempts, include_dead=args.include_dead)
        left = len(store.list(include_dead=True))
    if result.busy:
        raise MetaqError(f"another process is replaying {store_name(args.topic, args.group)}; try again later")
    emit(args, {"to_topic": args.to_topic, "replayed": result.succeeded, "failed": result.failed,
                "newly_dead": result.dead, "remaining": left},
         lambda: f"Replayed {result.succeeded} entries to {args.to_topic}; {result.failed} failed again, "
                 f"{result.dead} newly marked dead; {left} left in the store.")
    if result.failed or result.dead:
        note("Entries that failed stay in the store; see `metaq recover list` for their last error.")
    return 0


def _drop(args: argparse.Namespace) -> int:
    with _open_existing(args) as store:
        unknown = [] if args.all else [i for i in args.id if store.get(i) is None]
        removed = store.drop(None if args.all else args.id)
        left = len(store.list(include_dead=True))
    emit(args, {"dropped": removed, "unknown_ids": unknown, "remaining": left},
         lambda: f"Dropped {removed} entries; {left} left in the store.")
    if unknown:
        note(f"Not found (already replayed or dropped?): {', '.join(unknown)}")
    return 0
