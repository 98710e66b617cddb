"""The local recover store: messages a listener kept failing on, set aside so that their partition moves on.

    store = RecoverStore.open("~/.metaq_recover", "clicks", "etl")
    entry_id = store.append(message, error)           # flushed and fsynced before the caller skips the message
    [entry] = store.list()                              # RecoverEntry(id, topic, partition, offset, ..., attempts)
    store.replay(handler, max_attempts=20)              # ReplayResult(succeeded=1, failed=0, dead=0)
    store.drop()                                        # everything; or drop([ids])
    store.close()

MetaQ's ``RecoverStorageManager`` (docs/delivery-guarantees.md §3), with its weaknesses fixed: an entry whose
replay keeps failing is counted and, at ``max_attempts``, marked *dead* (kept, listed, no longer replayed
automatically) instead of being retried forever; a failing entry never stops a replay pass (MetaQ #99/#111).

One store per ``<topic>@<group>`` in a directory (``metaq.recover.dir``, default ``~/.metaq_recover``):

- ``<topic>@<group>.recover``: an append-only log of frames ``[u32 length][u32 crc32][msgpack map]``. The
  first frame is a header (format name, version, topic, group); then ``put`` (a whole entry), ``upd``
  (attempts, last error, dead flag) and ``del`` (a removal tombstone) records. Every append is flushed and
  fsynced before the call returns. A torn last frame (a crash mid-append) is dropped with a warning and
  cut off, as Kafka's log recovery does. Opening the store compacts it when it holds superseded records:
  the live entries are rewritten to a temp file, fsynced, renamed over the log, and the directory fsynced.
- ``<topic>@<group>.lock`` and ``.replay.lock``: ``flock`` locks. Several consumer processes of one group on
  one host share the store safely: every operation takes the first lock and first reads what the others
  appended (or reloads after another process compacted); only one process at a time runs a replay pass.

Within a process a store is thread-safe. Keys and values are stored as the raw bytes that were fetched.
"""


from __future__ import annotations

from metaq.consumer.recover.format import (
    DEFAULT_DIR,
    SUFFIX,
    RecoverEntry,
    ReplayResult,
    default_dir,
    describe_error,
    recover_stores,
    store_name,
)
from metaq.consumer.recover.manager import RecoverManager
from metaq.consumer.recover.recover_store import RecoverStore

__all__ = [
    "DEFAULT_DIR",
    "RecoverEntry",
    "RecoverManager",
    "RecoverStore",
    "ReplayResult",
    "SUFFIX",
    "default_dir",
    "describe_error",
    "recover_stores",
    "store_name",
]
