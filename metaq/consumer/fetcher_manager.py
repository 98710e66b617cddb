"""Kafka 0.8's ConsumerFetcherManager: which fetcher thread (:class:`~metaq.consumer.fetcher.FetchRequestRunner`)
fetches which partition, and the leader finder for the partitions without a leader (metaq/consumer/fetcher.py's
docstring tells the whole story).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from metaq.client.cluster import ClusterClient, Leader
from metaq.consumer.config import ConsumerConfig
from metaq.consumer.fetcher import FetchRequestRunner, connection_settings
from metaq.consumer.leader_finder import LeaderFinder, TopicPartition
from metaq.consumer.partition_info import PartitionTopicInfo
from metaq.errors import MetaqError
from metaq.hashing import java_string_hash
from metaq.metrics.consumer import ConsumerMetrics
from zk_layout import ZkLayout

log = logging.getLogger(__name__)

__all__ = ["FetcherManager", "fetcher_id"]


def _to_int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def fetcher_id(topic: str, partition: int, num_fetchers: int) -> int:
    """Kafka 0.8's choice of fetcher thread: ``Utils.abs(31 * topic.hashCode + partition) % numFetchers`` with
    Java's 32-bit overflow (and Kafka's abs, which maps Int.MinValue to 0)."""
    mixed = _to_int32(31 * java_string_hash(topic) + partition)
    return (0 if mixed == -(1 << 31) else abs(mixed)) % num_fetchers



class FetcherManager:
    """Starts, re-targets and stops the fetch runners and the leader finder of one consumer (module docstring).

    Thread-safe. ``last_error`` and :meth:`partition_errors` tell the consumer's state what went wrong last.
    """

    def __init__(self, config: ConsumerConfig, layout: ZkLayout, *, consumer_id: str,
                 client: ClusterClient | None = None, metrics: ConsumerMetrics | None = None) -> None:
        self._config = config
        self._metrics = metrics
        self._owns_client = client is None
        self._client = client if client is not None else ClusterClient(
            layout, connection_settings(config), metadata_max_age_ms=config.metadata_max_age_ms)
        self._settings = self._client.settings
        self.consumer_id = consumer_id
        self._lock = threading.Lock()  # guards everything below; never held while joining or doing I/O
        self._runners: dict[tuple[int, int], FetchRequestRunner] = {}
        self._finder: LeaderFinder | None = None
        self._running = False
        self._closed = False
        self._errors: dict[TopicPartition, str] = {}
        self.last_error: str | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    def start_connections(self, infos: Iterable[PartitionTopicInfo]) -> None:
        """Start fetching ``infos`` from their leaders; partitions without one go to the leader finder."""
        with self._lock:
            if self._closed:
                raise MetaqError(f"fetcher manager of {self.consumer_id} is closed")
            self._running = True
        no_leader: list[PartitionTopicInfo] = []
        infos = [info for info in infos if not info.revoked]
        try:
            leaders = self._client.leaders((info.key for info in infos), fresh=True)  # pipelined
        except MetaqError:
            leaders = {}  # then one at a time, so that each partition reports its own error
        for info in infos:
            if info.revoked:
                continue
            try:
                found = leaders[info.key] if info.key in leaders else self._client.leader(*info.key, fresh=True)
                leader = found if isinstance(found, Leader) else None
            except MetaqError as e:
                log.warning("cannot read the leader of %s-%d from ZooKeeper: %s", info.topic, info.partition, e)
                self.record_error(info.key, e)
                leader = None
            if leader is None or not self.assign(info, leader):
                no_leader.append(info)
        if no_leader:
            log.info("%s: no live leader for %s yet; the leader finder keeps looking", self.consumer_id,
                     sorted(info.key for info in no_leader))
            self.leader_lost(no_leader)

    def stop_connections(self, timeout: float = 10.0) -> None:
        """Stop and join every runner and the leader finder, within ``timeout`` seconds in all."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._running = False
            runners = list(self._runners.values())
            self._runners.clear()
            finder, self._finder = self._finder, None
        threads: list[FetchRequestRunner | LeaderFinder] = list(runners)
        if finder is not None:
            threads.append(finder)
        for thread in threads:
            thread.shutdown()
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [thread.name for thread in threads if thread.is_alive()]
        if stuck:
            log.error("%s: fetcher threads %s did not stop within %.1f s", self.consumer_id, stuck, timeout)
        elif threads:
            log.debug("%s: stopped %d fetcher threads", self.consumer_id, len(threads))

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self.stop_connections()
        if self._owns_client:
            self._client.close()

    # -- state -------------------------------------------------------------------------------------

    def partition_errors(self) -> dict[TopicPartition, str]:
        """The last error of each partition that has not fetched successfully since."""
        with self._lock:
            return dict(self._errors)

    def assignment(self) -> dict[str, list[TopicPartition]]:
        """Thread name -> partitions it fetches (the leader finder's: partitions still without a leader)."""
        with self._lock:
            runners = list(self._runners.values())
            finder = self._finder
        result = {runner.name: runner.partitions() for runner in runners}
        if finder is not None:
            result[finder.name] = finder.pending()
        return result

    def threads(self) -> list[threading.Thread]:
        with self._lock:
            found: list[threading.Thread] = list(self._runners.values())
            if self._finder is not None:
                found.append(self._finder)
        return found

    # -- called by runners and the leader finder ---------------------------------------------------

    def assign(self, info: PartitionTopicInfo, leader: Leader) -> bool:
        """Give ``info`` to the runner for (leader, fetcher id), starting it if needed; False when stopped."""
        fid = fetcher_id(info.topic, info.partition, self._config.num_consumer_fetchers)
        with self._lock:
            if not self._running:
                return False
            runner = self._runners.get((leader.broker_id, fid))
            if runner is None:
                runner = FetchRequestRunner(self, self._config, leader, fid, consumer_id=self.consumer_id,
                                            settings=self._settings, metrics=self._metrics)
                self._runners[(leader.broker_id, fid)] = runner
                runner.start()
            else:
                runner.move_to(leader.host, leader.port)
            runner.add(info)
        return True

    def leader_lost(self, infos: list[PartitionTopicInfo]) -> None:
        with self._lock:
            if not self._running:
                return
            if self._finder is None:
                self._finder = LeaderFinder(f"{self.consumer_id}-leader-finder", self._client,
                                            backoff_s=self._config.refresh_leader_backoff_ms / 1000.0,
                                            assign=self.assign)
                self._finder.start()
            self._finder.add(infos)

    def record_error(self, key: TopicPartition | None, error: BaseException) -> None:
        text = f"{type(error).__name__}: {error}"
        with self._lock:
            self.last_error = text if key is None else f"{key[0]}-{key[1]}: {text}"
            if key is not None:
                self._errors[key] = text

    def clear_error(self, key: TopicPartition) -> None:
        if key in self._errors:  # unlocked peek: the common case, no error, costs no lock
            with self._lock:
                self._errors.pop(key, None)
