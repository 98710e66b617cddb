"""What a broker does for topic admin requests written to ZooKeeper by any broker or tool:

* ``/config/changes/config_change_<seq>`` (Kafka's notification ``{"version":2,"entity_path":"topics/<t>"}``):
  re-read ``/config/topics/<t>`` and apply it to the topic's local logs, without a restart. A notification for
  ``users/<u>`` (SCRAM credentials) is handed to ``on_user_change`` (in a worker thread), and every
  notification's entity path to ``on_config_change`` (client quotas, broker configs: docs/quotas.md). Notifications
  older than 15 minutes are purged, as Kafka's ``ZkNodeChangeNotificationListener`` does.
* ``/admin/delete_topics/<t>``: delete the local logs of ``t``, then the partition nodes of the partitions
  this broker hosts; the broker that removes the last partition node removes the topic node, its config
  and the marker. A topic whose partitions live on a broker that is down stays marked (hidden from
  metadata, see :mod:`metaq.broker.metadata`) until that broker is back, as in Kafka.

Watches fire on kazoo threads and only wake the worker; the work runs on the event loop (LogManager is
single-threaded), with ZooKeeper calls in worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kazoo.exceptions import KazooException

from metaq.broker.log.config import LogConfig
from metaq.broker.log.log_manager import LogManager
from metaq.broker.metadata import MetadataWatcher
from metaq.broker.topic_config import log_config_for
from metaq.errors import MetaqError, ZooKeeperError
from metaq.retry import zookeeper_follower
from zk_layout import ZkLayout, paths, validate_topic
from zk_layout.topics import check_deletable

log = logging.getLogger(__name__)

SAFETY_RUN_S = 30.0  # run even without events, in case a watch was missed
CHANGE_EXPIRATION_MS = 15 * 60 * 1000  # Kafka's changeExpirationMs
METADATA_WAIT_S = 5.0


class AdminWatcher:
    """Applies topic config changes and topic deletions to this broker's logs."""

    def __init__(self, broker_id: int, layout: ZkLayout, logs: LogManager, metadata: MetadataWatcher,
                 base: LogConfig, *, on_user_change: Callable[[str], None] | None = None,
                 on_config_change: Callable[[str], None] | None = None,
                 on_topic_config: Callable[[str, Mapping[str, str]], None] | None = None) -> None:
        """``on_config_change`` gets every notification's entity path (worker thread; client quotas and
        broker configs, metaq/broker/quota/config_store.py); ``on_topic_config`` every topic config applied."""
        self._on_user_change = on_user_change
        self._on_config_change = on_config_change
        self._on_topic_config = on_topic_config
        self._broker_id = broker_id
        self._layout = layout
        self._logs = logs
        self._metadata = metadata
        self._base = base
        self._last_change = -1
        self._configured: set[str] = set()
        self._retry = zookeeper_follower("topic_admin")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Apply every local topic's config and pending deletions, then follow changes."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        changes = await asyncio.to_thread(self._layout.config_changes, self.kick)
        self._last_change = max((_sequence(name) for name in changes), default=-1)
        try:
            await self.run_once()
        except (MetaqError, KazooException, OSError) as e:  # the task retries: one stuck deletion must not stop startup
            log.warning("applying topic admin changes from ZooKeeper failed (will retry): %s", e)
            self._wake.set()
        self._task = asyncio.create_task(self._run(), name="metaq-broker-topic-admin")

    async def stop(self) -> None:
        """Cancel the task, again if a cancellation was lost: Python 3.11's ``asyncio.wait_for`` drops one that
        arrives as the awaited wake-up completes, and the task would then wait for its next run."""
        task = self._task
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=1.0)
        if task is not None and not task.cancelled() and task.exception() is not None:
            log.warning("the topic admin task ended with %r", task.exception())

    def kick(self, *_: Any) -> None:
        """Watch callback (any thread): schedule a run; never blocks."""
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            loop.call_soon_threadsafe(wake.set)

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), SAFETY_RUN_S)
            self._wake.clear()
            try:
                await self.run_once()
            except (MetaqError, KazooException, OSError) as e:
                log.warning("applying topic admin changes from ZooKeeper failed (will retry): %s", e)
                await asyncio.sleep(self._retry.delay(1))
                self._wake.set()

    async def run_once(self) -> None:
        await self._apply_config_changes()
        await self._apply_new_topic_configs()
        failed = False
        for name in await asyncio.to_thread(self._layout.topics_marked_for_deletion, self.kick):
            if reason := _undeletable(name):
                await self._discard_marker(name, reason)
                continue
            try:
                await self._delete_topic(name)
            except (MetaqError, KazooException, OSError) as e:  # one topic's failure must not block the others
                log.warning("deleting topic %s failed (will retry): %s", name, e)
                failed = True
        if failed:
            raise ZooKeeperError("some topic deletions failed (see above)")

    async def _discard_marker(self, name: str, reason: str) -> None:
        """A marker no deletion may follow (an internal topic, no valid topic name) is removed, as Kafka's
        controller removes markers of topics that do not exist (``KafkaController.processTopicDeletion``)."""
        if await asyncio.to_thread(self._layout.discard_deletion_marker, name):
            log.error("ignored and removed the deletion request %s/%s: %s", paths.ADMIN_DELETE_TOPICS, name, reason)

    # ------------------------------------------------------------------------------------- configs

    async def _apply_config_changes(self) -> None:
        names = await asyncio.to_thread(self._layout.config_changes, self.kick)
        fresh = [name for name in names if _sequence(name) > self._last_change]
        for name in fresh:
            self._last_change = _sequence(name)
            change = await asyncio.to_thread(self._layout.config_change, name)
            topic = change[0].topic if change is not None else None
            if topic is not None:
                await self.apply_topic_config(topic)
            user = change[0].user if change is not None else None
            if user is not None and self._on_user_change is not None:
                await asyncio.to_thread(self._on_user_change, user)
            if change is not None and self._on_config_change is not None:
                await asyncio.to_thread(self._on_config_change, change[0].entity_path)
        if fresh:
            await asyncio.to_thread(self._purge, names)

    def _purge(self, names: list[str]) -> None:
        """Delete notifications older than CHANGE_EXPIRATION_MS, oldest first (as Kafka does after processing);
        the first young one ends the scan, since later ones are younger still."""
        now = int(time.time() * 1000)
        for name in names:
            change = self._layout.config_change(name)
            if change is not None and now - change[1] <= CHANGE_EXPIRATION_MS:
                return
            self._layout.delete_config_change(name)

    async def _apply_new_topic_configs(self) -> None:
        """Topics created since the last run (their config was written with them, without a notification)."""
        topics = set(self._metadata.snapshot.topics) | self._logs.topics()
        for topic in sorted(topics - self._configured):
            await self.apply_topic_config(topic)

    def configure_new_topics(self, topics: Iterable[str]) -> None:
        """Blocking, on the metadata watcher's thread before it publishes ``topics``: the stored config of
        each topic not configured yet, so that no request creates its log with the broker's defaults (Kafka
        reads ``/config/topics/<t>`` when it creates a log). A ZooKeeper error leaves it to the next run."""
        for topic in sorted(set(topics) - self._configured):
            try:
                self._configure(topic)
            except (MetaqError, KazooException) as e:
                log.warning("cannot read the config of new topic %s yet (applied on the next run): %s", topic, e)

    async def apply_topic_config(self, topic: str) -> None:
        await asyncio.to_thread(self._configure, topic)

    def _configure(self, topic: str) -> None:
        stored = self._layout.topic_config(topic)
        overrides = stored.config if stored is not None else {}
        try:
            config = log_config_for(self._base, overrides)
        except MetaqError as e:
            log.error("ignoring the config of topic %s in %s: %s", topic, paths.topic_config_path(topic), e)
            config = self._base
        self._logs.set_topic_config(topic, config)
        if self._on_topic_config is not None:
            self._on_topic_config(topic, overrides)
        self._configured.add(topic)
        if overrides:
            log.info("topic %s: config overrides %s applied", topic, overrides)

    # ------------------------------------------------------------------------------------- deletion

    async def _delete_topic(self, topic: str) -> None:
        # first make sure our own requests no longer see the topic, so no new log is created meanwhile
        await asyncio.to_thread(self._metadata.wait_for, lambda s: topic not in s.topics, METADATA_WAIT_S)
        assignment = await asyncio.to_thread(self._layout.topic_assignment, topic)
        removed = self._logs.delete_topic(topic)
        self._configured.discard(topic)
        if removed:
            log.info("topic %s is being deleted: removed local logs of partitions %s", topic, removed)
        if assignment is None:
            await asyncio.to_thread(self._layout.finish_topic_deletion, topic)
            return
        mine = [p for p, replicas in assignment.partitions.items() if self._broker_id in replicas]
        await asyncio.to_thread(self._finish, topic, mine)

    def _finish(self, topic: str, mine: list[int]) -> None:
        self._layout.delete_partition_nodes(topic, mine)
        remaining = self._layout.remaining_partition_nodes(topic)
        if remaining:
            log.info("topic %s: waiting for the brokers hosting partitions %s to delete them", topic, remaining)
            return
        self._layout.finish_topic_deletion(topic)
        log.info("topic %s deleted", topic)


def _undeletable(name: str) -> str | None:
    """Why the ``/admin/delete_topics`` child ``name`` must not be obeyed, or None."""
    try:
        validate_topic(name)
        check_deletable(name)
    except MetaqError as e:
        return str(e)
    return None


def _sequence(name: str) -> int:
    digits = name[len(paths.CONFIG_CHANGE_PREFIX):] if name.startswith(paths.CONFIG_CHANGE_PREFIX) else ""
    return int(digits) if digits.isdigit() else -1
