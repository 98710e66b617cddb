"""The broker's registration in ZooKeeper, kept across session loss.

States (only ``_set_state`` changes them)::

    UNREGISTERED --register()--> REGISTERED --session LOST--> LOST --CONNECTED--> REGISTERED (re-register)
    any --close()--> CLOSED (terminal)

kazoo's listener must not block, so re-registration runs on a short-lived thread.

A broker restarted right after a kill -9 finds its previous run's ephemeral node, which lives until that
session expires: :meth:`BrokerRegistration.register` waits for it (as Kafka does) for up to the session
timeout plus :data:`STALE_REGISTRATION_MARGIN_S`, and only a node that outlives that wait, i.e. one held
by a live broker, is refused.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient, KazooState

from metaq.retry import broker_registration
from zk_layout import BrokerInfo, ZkLayout

log = logging.getLogger(__name__)

UNREGISTERED = "UNREGISTERED"
REGISTERED = "REGISTERED"
LOST = "LOST"
CLOSED = "CLOSED"

STALE_REGISTRATION_MARGIN_S = 10.0
"""ZooKeeper expires a session up to a tick (2 s by default) after its timeout, a loaded server later."""


class BrokerRegistration:
    def __init__(
        self, client: KazooClient, layout: ZkLayout, info: BrokerInfo, on_reconnect: Callable[[], None], *,
        session_timeout_ms: int | None = None,
    ) -> None:
        self._client = client
        self._stale_wait_s = (None if session_timeout_ms is None
                              else session_timeout_ms / 1000 + STALE_REGISTRATION_MARGIN_S)
        self._layout = layout
        self._info = info
        self._on_reconnect = on_reconnect
        self._lock = threading.Lock()
        self.state = UNREGISTERED

    def _set_state(self, state: str) -> None:
        log.info("broker %d registration: %s -> %s", self._info.id, self.state, state)
        self.state = state

    def register(self) -> None:
        """Create /brokers/ids/<id>; a node of another session is waited for (see the module docstring)."""
        self._layout.ensure_persistent_paths()
        self._layout.ensure_cluster_id()
        broker_registration().call(lambda: self._layout.register_broker(self._info, stale_wait_s=self._stale_wait_s))
        with self._lock:
            self._set_state(REGISTERED)
        self._client.add_listener(self._on_session_event)

    def close(self) -> None:
        with self._lock:
            self._set_state(CLOSED)
        self._client.remove_listener(self._on_session_event)

    def _on_session_event(self, state: str) -> None:
        if state == KazooState.LOST:
            with self._lock:
                if self.state == REGISTERED:
                    self._set_state(LOST)
        elif state == KazooState.CONNECTED:
            with self._lock:
                needs = self.state == LOST
            if needs:
                threading.Thread(target=self._reregister, name="metaq-broker-reregister", daemon=True).start()
            self._on_reconnect()

    def _reregister(self) -> None:
        self._info = dataclasses.replace(self._info, timestamp_ms=int(time.time() * 1000))
        try:
            self._layout.register_broker(self._info)
        except Exception as e:  # leave state LOST; the next CONNECTED tries again
            log.error("broker %d could not re-register after session loss: %s", self._info.id, e)
            return
        with self._lock:
            if self.state == LOST:
                self._set_state(REGISTERED)
        log.warning("broker %d re-registered in ZooKeeper after its session expired", self._info.id)
