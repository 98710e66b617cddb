"""A follower's replica fetcher: one thread per leader broker, named ``metaq-replica-fetcher-<leader id>``.

Before fetching from a new leader it truncates the log where it diverges from the leader's, asking the
leader with OffsetForLeaderEpoch (KIP-101). Then it sends ordinary Fetch requests through
:mod:`metaq.client` (with the inter-broker listener's TLS and SASL, as any client: see
:meth:`BrokerConfig.inter_broker_security`) with ``replica_id`` = this broker's id (the leader learns the
follower's LEO from the fetch offsets) and ``current_leader_epoch`` = the epoch it follows (a leader at
another epoch answers FENCED/UNKNOWN_LEADER_EPOCH instead of data). Complete batches are appended on the event loop by
:meth:`ReplicaManager.append_fetched`, which drops them if the role changed meanwhile. Errors back off for
``replica.fetch.backoff.ms``; the partition moves when the state node does.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Collection, Iterator
from typing import TYPE_CHECKING, Any

from kafka.protocol.consumer import FetchRequest, OffsetForLeaderEpochRequest

from metaq.broker.config import BrokerConfig
from metaq.client.connection import BrokerConnection
from metaq.client.settings import ConnectionSettings
from metaq.errors import ErrorCode, MetaqError, for_code
from metaq.protocol.batches import valid_prefix

if TYPE_CHECKING:
    from metaq.broker.replication.manager import ReplicaManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
APPEND_TIMEOUT_S = 30.0


class ReplicaFetcher(threading.Thread):
    def __init__(self, manager: ReplicaManager, config: BrokerConfig, leader: int) -> None:
        super().__init__(name=f"metaq-replica-fetcher-{leader}", daemon=True)
        self._manager = manager
        self._config = config
        self.leader = leader
        self._partitions: dict[TopicPartition, int] = {}  # -> leader epoch followed
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._changed = threading.Event()
        self._conn: BrokerConnection | None = None
        # the inter-broker listener's protocol, as any client would speak it (TLS, SASL: BrokerConfig)
        self._settings = ConnectionSettings(
            client_id=f"metaq-replica-fetcher-{manager.broker_id}",
            request_timeout_ms=config.replica_fetch_wait_max_ms + 30000,
            max_response_bytes=max(104857600, 2 * config.replica_fetch_response_max_bytes),
            security=config.inter_broker_security())

    def add(self, key: TopicPartition, leader_epoch: int) -> None:
        with self._lock:
            self._partitions[key] = leader_epoch
        self._changed.set()

    def remove(self, key: TopicPartition) -> None:
        with self._lock:
            self._partitions.pop(key, None)

    def idle(self) -> bool:
        with self._lock:
            return not self._partitions

    def shutdown(self) -> None:
        self._stopped.set()
        self._changed.set()
        conn = self._conn
        if conn is not None:
            conn.close()

    def run(self) -> None:
        backoff = self._config.replica_fetch_backoff_ms / 1000.0
        failures = 0
        while not self._stopped.is_set():
            with self._lock:
                partitions = dict(self._partitions)
            if not partitions:
                self._changed.wait(0.5)
                self._changed.clear()
                continue
            try:
                if not self._fetch_once(partitions):
                    self._stopped.wait(backoff)
                failures = 0
            except (MetaqError, OSError) as e:
                failures += 1
                if not self._stopped.is_set():  # the first failure of a run loudly, the rest quietly
                    log.log(logging.WARNING if failures == 1 else logging.DEBUG,
                            "replica fetch from broker %d failed (retrying every %.1fs): %s", self.leader, backoff, e)
                self._close()
                self._stopped.wait(backoff)
            except Exception:
                log.exception("replica fetcher for broker %d failed unexpectedly", self.leader)
                self._close()
                self._stopped.wait(backoff)
        self._close()

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connection(self) -> BrokerConnection:
        if self._conn is None:
            address = self._manager.leader_address(self.leader)
            if address is None:
                raise MetaqError(f"broker {self.leader} is not registered")
            self._conn = self._settings.new_connection(address[0], address[1])
        self._conn.connect()
        return self._conn

    def _fetch_once(self, partitions: dict[TopicPartition, int]) -> bool:
        """One Fetch round; False if nothing could be fetched (back off)."""
        positions: dict[TopicPartition, tuple[int, int]] = {}
        topics: dict[str, list[dict[str, int]]] = {}
        truncating: dict[TopicPartition, tuple[int, int]] = {}
        for key, epoch in partitions.items():
            position = self._manager.fetch_position(key)
            if position is None or position[1] != epoch:
                continue
            if position[2] is not None:
                truncating[key] = (epoch, position[2])
                continue
            positions[key] = position[:2]
            topics.setdefault(key[0], []).append({
                "partition": key[1], "current_leader_epoch": epoch, "fetch_offset": position[0],
                "log_start_offset": -1, "partition_max_bytes": self._config.replica_fetch_max_bytes})
        if truncating:
            self._truncate(truncating)
        if not positions:
            return bool(truncating)
        fields: dict[str, Any] = {
            "replica_id": self._manager.broker_id,
            "max_wait_ms": self._config.replica_fetch_wait_max_ms,
            "min_bytes": 1,
            "max_bytes": self._config.replica_fetch_response_max_bytes,
            "isolation_level": 0,
            "topics": [{"topic": topic, "partitions": parts} for topic, parts in topics.items()],
        }
        response = self._connection().send(FetchRequest, fields)
        ok = False
        for key, part in self._answers(response.responses, "partition_index", positions, "replica fetch"):
            if part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                self._hand_over(self._manager.leader_out_of_range, key, self.leader, positions[key][1],
                                part.high_watermark, part.log_start_offset)
            if part.error_code:
                continue
            ok = True
            records = bytes(part.records or b"")
            complete, _ = valid_prefix(records)
            self._hand_over(self._manager.append_fetched, key, self.leader, positions[key][1],
                            records[:complete], part.high_watermark, part.log_start_offset)
        return ok

    def _answers(self, topics: Any, index: str, wanted: Collection[TopicPartition],
                 what: str) -> Iterator[tuple[TopicPartition, Any]]:
        """(key, answer) of each partition of a response that was asked for; errors are logged here."""
        for topic in topics:
            for part in topic.partitions:
                key = (topic.topic, getattr(part, index))
                if key not in wanted:
                    continue
                if part.error_code:
                    log.info("%s of %s-%d from broker %d: %s", what, *key, self.leader,
                             for_code(part.error_code).message)
                yield key, part

    def _truncate(self, truncating: dict[TopicPartition, tuple[int, int]]) -> None:
        """KIP-101: ask the leader where our latest epoch ends (OffsetForLeaderEpoch) and truncate there."""
        asked: dict[str, list[dict[str, int]]] = {}
        for (topic, partition), (followed, latest) in truncating.items():
            if latest < 0:  # no epochs in our log: the manager falls back to the high watermark
                self._hand_over(self._manager.truncate_follower, (topic, partition), self.leader, followed, -1, -1)
                continue
            asked.setdefault(topic, []).append(
                {"partition": partition, "current_leader_epoch": followed, "leader_epoch": latest})
        if not asked:
            return
        response = self._connection().send(OffsetForLeaderEpochRequest, {
            "replica_id": self._manager.broker_id,
            "topics": [{"topic": topic, "partitions": parts} for topic, parts in asked.items()]})
        for key, part in self._answers(response.topics, "partition", truncating, "OffsetForLeaderEpoch"):
            if not part.error_code:
                self._hand_over(self._manager.truncate_follower, key, self.leader, truncating[key][0],
                                part.leader_epoch, part.end_offset)

    def _hand_over(self, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` on the broker's event loop (logs are single-threaded) and wait for it."""
        loop = self._manager.loop
        if loop is None or loop.is_closed():
            return

        async def call() -> None:
            fn(*args)

        asyncio.run_coroutine_threadsafe(call(), loop).result(APPEND_TIMEOUT_S)
