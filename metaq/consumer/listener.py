"""MetaQ's listener API on the 0.8 connector: subscribe listeners, and metaq runs the consuming loop.

    class Printer:
        executor = None                       # or an Executor: each chunk runs there, one chunk at a time
        def receive_message(self, message: MessageAndMetadata) -> None:
            print(message.offset, message.value)    # raising = failed: retried, then set aside

    with MessageConsumer({"group.id": "etl", "zookeeper.connect": "127.0.0.1:2181"},
                         value_deserializer="json") as consumer:
        consumer.subscribe("clicks", 1024 * 1024, Printer()).complete_subscribe()
        ...                                   # messages arrive on "metaq-dispatch-clicks-0"

Delivery (docs/delivery-guarantees.md §3 and §6 rows 7 and 9): one dispatch thread per stream takes whole chunks
with ``KafkaStream.iter_batches()``; a message's offset counts as consumed only once the listener finished
it (per message, per part for batch listeners), so the commits cover processed messages only (at-least-once:
after a crash, duplicates are possible, losses are not), and the commit a rebalance makes before releasing
a partition covers everything finished until then. Between two messages (two parts) the dispatcher checks
that it may still deliver: it waits while ZooKeeper is SUSPENDED or the session lease lapsed, and drops the
rest of the chunk once its partition was revoked.

A message whose handling raises is retried ``metaq.max.fetch.retries`` times with a short backoff, then written
(fsynced) to the topic's :class:`~metaq.consumer.recover.RecoverStore` and skipped, so its partition moves on.
A :class:`~metaq.consumer.recover.RecoverManager` thread per topic redelivers the stored messages through the
same listener (and executor) every ``metaq.recover.interval.ms``, until they succeed or reach
``metaq.recover.max.attempts``.

Listeners are called from the dispatch threads (or their executor) and from the recover thread, possibly at
the same time: they must be thread-safe. They never hold up a rebalance, which only stops the fetchers.

The code lives in :mod:`metaq.consumer.delivery` (listener protocols, retry-then-skip) and
:mod:`metaq.consumer.dispatcher` (the dispatch threads, :class:`MessageConsumer`); this module re-exports
the public API.
"""

from __future__ import annotations

from metaq.consumer.delivery import (
    ERROR_PAUSE_S,
    MAX_ERROR_PAUSE_S,
    BatchMessageListener,
    Listener,
    MessageListener,
    default_retry_wait,
    split_by_size,
)
from metaq.consumer.delivery import _size as _size  # tests/consumer/test_stream_fast_paths.py
from metaq.consumer.dispatcher import (
    CLOSED,
    DEFAULT_SHUTDOWN_TIMEOUT_S,
    RUNNING,
    STUCK_LOG_S,
    SUBSCRIBING,
    Connector,
    ConnectorFactory,
    MessageConsumer,
    Stream,
)

__all__ = [
    "BatchMessageListener",
    "CLOSED",
    "Connector",
    "ConnectorFactory",
    "DEFAULT_SHUTDOWN_TIMEOUT_S",
    "ERROR_PAUSE_S",
    "Listener",
    "MAX_ERROR_PAUSE_S",
    "MessageConsumer",
    "MessageListener",
    "RUNNING",
    "STUCK_LOG_S",
    "SUBSCRIBING",
    "Stream",
    "default_retry_wait",
    "split_by_size",
]
