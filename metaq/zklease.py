"""SessionLease: proof, renewed in the background, that this process's ZooKeeper session is still alive.

    lease = SessionLease(client, requested_timeout_ms=6000, fraction=2 / 3, on_renewed=gate.extend,
                         on_void=gate.lapse, name="etl-session-lease")
    lease.start()                      # renews about every lease / 4
    ...
    lease.stop()

Why: kazoo reports SUSPENDED only when its connection thread notices a missing reply, and a process paused
(SIGSTOP, a long GC, a swapped-out VM) past its session timeout resumes *connected* as far as it knows: for a
few milliseconds it would hand out what its fetchers bring back, although the server expired the session and
other members own those partitions by then. A reply to a request sent at ``t`` proves that the server heard
from the session at ``t`` or later, so the session lives at least until ``t + negotiated timeout`` (the server
expires it no earlier, rounding up to its tick). The lease therefore ends ``fraction`` of the negotiated
timeout after the *sending* of the last answered request, never after its reply (a reply read late, after a
pause, proves nothing new), and a consumer delivers only while the lease runs (see
:class:`metaq.consumer.streams.DeliveryGate`).

The renewals are cheap reads (``exists`` on the chroot) that also serve as kazoo's heartbeat. The negotiated
timeout is read from kazoo's connection handler by :func:`track_negotiated_timeout`, the one place that
touches kazoo internals; if that ever fails, the requested timeout is used (and a warning says so).
"""

from __future__ import annotations

import logging
import math
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

log = logging.getLogger(__name__)

__all__ = ["SessionLease", "negotiated_timeout_ms", "track_negotiated_timeout"]

RENEWALS_PER_LEASE = 4  # a lease survives three late or lost renewals in a row

_negotiated: weakref.WeakKeyDictionary[KazooClient, float] = weakref.WeakKeyDictionary()


def track_negotiated_timeout(client: KazooClient) -> bool:
    """Record the session timeout the server grants ``client`` at every (re)connection; call before start().

    kazoo keeps the negotiated value in a local variable of ``ConnectionHandler._connect`` and returns
    ``read_timeout = negotiated * 2/3`` from it, so this wraps that method on this client's handler instance
    (kazoo's source is not patched). Returns False, and the lease then falls back to the requested timeout,
    if the handler does not look as expected (another kazoo version)."""
    handler = getattr(client, "_connection", None)
    original = getattr(handler, "_connect", None)
    if handler is None or not callable(original):
        log.warning("kazoo's connection handler has no _connect(); the session lease uses the requested timeout")
        return False
    ref = weakref.ref(client)

    def connect_and_record(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        owner = ref()
        try:
            read_timeout_ms = float(result[0])
        except (TypeError, ValueError, IndexError):
            log.warning("kazoo's _connect() returned %r; the session lease uses the requested timeout", result)
            return result
        if owner is not None:
            _negotiated[owner] = read_timeout_ms * 3.0 / 2.0
        return result

    handler._connect = connect_and_record
    return True


def negotiated_timeout_ms(client: KazooClient) -> float | None:
    """The session timeout the server granted at the last connection, if :func:`track_negotiated_timeout` saw it."""
    return _negotiated.get(client)


class SessionLease:
    """Keeps renewing; calls ``on_renewed(until)`` after each answered request (``until`` on the monotonic
    clock) and ``on_void()`` when the session is lost. Callbacks must be quick (one runs on kazoo's thread)."""

    def __init__(
        self,
        client: KazooClient,
        *,
        requested_timeout_ms: int,
        fraction: float,
        on_renewed: Callable[[float], None],
        on_void: Callable[[], None],
        name: str,
    ) -> None:
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"lease fraction must be in (0, 1), got {fraction}")
        self._client = client
        self._requested_ms = requested_timeout_ms
        self._fraction = fraction
        self._on_renewed = on_renewed
        self._on_void = on_void
        self._stopped = threading.Event()
        self._wakeup = threading.Event()
        self.renewed_until = -math.inf
        self.renewals = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @property
    def length_s(self) -> float:
        """How long one answered request proves the session alive."""
        timeout_ms = negotiated_timeout_ms(self._client) or self._requested_ms
        return self._fraction * timeout_ms / 1000.0

    def start(self) -> None:
        self._client.add_listener(self._on_state)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._wakeup.set()
        self._client.remove_listener(self._on_state)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(5)

    def _on_state(self, state: str) -> None:
        """kazoo's listener (must not block): a lost session voids the lease; a connection renews it now."""
        if state == KazooState.LOST:
            self._on_void()
        elif state == KazooState.CONNECTED:
            self._wakeup.set()

    def _run(self) -> None:
        while not self._stopped.is_set():
            length = self.length_s
            sent = time.monotonic()
            if self._renew(length):
                until = sent + length
                late = time.monotonic() - self.renewed_until
                if late > 0 and self.renewed_until != -math.inf:
                    log.info("the session lease had run out for %.3fs (no timely reply from ZooKeeper); "
                             "delivery was held meanwhile", late)
                self.renewed_until = until
                self.renewals += 1
                self._on_renewed(until)
                pause = sent + length / RENEWALS_PER_LEASE - time.monotonic()
            else:
                pause = min(0.1, length / RENEWALS_PER_LEASE)  # disconnected: try again soon after CONNECTED
            if pause > 0:
                self._wakeup.wait(pause)
            self._wakeup.clear()

    def _renew(self, length: float) -> bool:
        try:
            self._client.exists_async("/").get(timeout=max(length, 0.1))
        except (KazooException, KazooTimeoutError) as e:
            log.debug("session lease not renewed: %r", e)
            return False
        return True
