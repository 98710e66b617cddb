"""Every retry and backoff policy of metaq: named, built from config values, evaluated by tenacity.

    policy = producer_send(retries=5, retry_backoff_ms=100, retry_backoff_max_ms=1000)
    policy.delay(1)                                            # ~0.1 s: the pause after the first failure
    policy.delay_after(1, NotLeaderForPartitionError("..."))   # the same, or None to give up
    policy.call(send_once, sleep=closing.wait)                 # run with retries (a tenacity.Retrying)

Only errors whose class says ``retriable`` (metaq/errors.py) are retried; a policy may add classes in
``also`` with the reason written where it is built. Loops that cannot block inside tenacity (the producer's
sender, fetcher runners, the rebalance executor) ask :meth:`RetryPolicy.delay` or
:meth:`RetryPolicy.delay_after` and wait in their own way; the others call :meth:`RetryPolicy.call`.
Attempts are counted from 1, the first included: ``max_attempts=1`` never retries.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import tenacity
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from metaq.errors import MetaqError, ProtocolError

__all__ = [
    "RetryPolicy", "admin_list_offsets", "admin_reader", "broker_registration", "consumer_registration", "fetcher",
    "is_retriable",
    "offsets_commit", "offsets_fetch", "producer_send", "rebalance_attempts", "rebalance_rounds",
    "replica_fetch", "replica_role_retry", "spark_fetch", "spark_list_offsets", "wait_jittered", "wait_uniform",
    "zookeeper_follower",
]

T = TypeVar("T")

BeforeSleep = Callable[[tenacity.RetryCallState], None]

_RNG = random.Random()
"""Jitter comes from a generator of our own: the global one is the application's (and a test's: hypothesis
reports draws from it made by other threads while it generates data)."""


def is_retriable(error: BaseException) -> bool:
    """Whether the error's class says retrying can help."""
    return isinstance(error, MetaqError) and error.retriable


class wait_jittered(wait_base):  # noqa: N801 (tenacity's naming of wait strategies)
    """``inner`` scaled by a random factor in [low, high], so members of a group do not retry in lockstep."""

    def __init__(self, inner: wait_base, low: float = 0.8, high: float = 1.2,
                 uniform: Callable[[float, float], float] = _RNG.uniform) -> None:
        self._inner = inner
        self._low = low
        self._high = high
        self._uniform = uniform

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        return float(self._inner(retry_state)) * self._uniform(self._low, self._high)


class wait_uniform(wait_base):  # noqa: N801 (tenacity's naming of wait strategies)
    """A random wait in [low, high] (tenacity's wait_random, drawn from :data:`_RNG`)."""

    def __init__(self, low: float, high: float) -> None:
        self._low = low
        self._high = high

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        return _RNG.uniform(self._low, self._high)


@dataclass(frozen=True)
class RetryPolicy:
    """A named policy: the wait between attempts, when to stop, and which errors are retried."""

    name: str
    wait: wait_base
    max_attempts: int | None = None
    """Attempts in all, the first included; None: no limit."""
    deadline_s: float | None = None
    """No retry after an attempt that failed this long after the first one started; None: no limit."""
    also: tuple[type[BaseException], ...] = ()
    """Classes retried besides the retriable ones."""

    def retriable(self, error: BaseException) -> bool:
        return is_retriable(error) or isinstance(error, self.also)

    def delay(self, attempt: int) -> float:
        """Seconds to wait after ``attempt`` failures in a row (attempt >= 1)."""
        state = tenacity.RetryCallState(self._retrying(), fn=None, args=(), kwargs={})
        state.attempt_number = max(attempt, 1)
        return float(self.wait(state))

    def exhausted(self, attempt: int, elapsed_s: float = 0.0) -> bool:
        """Whether ``attempt`` attempts, the first of them ``elapsed_s`` ago, are all this policy allows."""
        return (self.max_attempts is not None and attempt >= self.max_attempts) or (
            self.deadline_s is not None and elapsed_s >= self.deadline_s)

    def delay_after(self, attempt: int, error: BaseException) -> float | None:
        """Seconds to wait before attempt ``attempt + 1`` after ``error``, or None to give up."""
        if not self.retriable(error) or self.exhausted(attempt):
            return None
        return self.delay(attempt)

    def call(self, fn: Callable[[], T], *, sleep: Callable[[float], object] = time.sleep,
             stop_event: threading.Event | None = None, before_sleep: BeforeSleep | None = None,
             clock: Callable[[], float] = time.monotonic) -> T:
        """``fn()``, retried as the policy says; the last error is raised as it is. ``sleep`` waits (an
        event's ``wait`` makes a close cut the backoff short), ``clock`` measures the deadline."""
        started = clock()
        stop: stop_base = tenacity.stop_never
        if self.max_attempts is not None:
            stop = stop | tenacity.stop_after_attempt(self.max_attempts)
        if self.deadline_s is not None:
            deadline_s = self.deadline_s
            stop = stop | _stop_when(lambda: clock() - started >= deadline_s)
        if stop_event is not None:
            stop = stop | tenacity.stop_when_event_set(stop_event)
        return self._retrying(stop=stop, sleep=sleep, before_sleep=before_sleep)(fn)

    def _retrying(self, *, stop: stop_base = tenacity.stop_never, sleep: Callable[[float], object] = time.sleep,
                  before_sleep: BeforeSleep | None = None) -> tenacity.Retrying:
        def pause(seconds: float) -> None:
            sleep(seconds)

        return tenacity.Retrying(
            stop=stop, wait=self.wait, retry=tenacity.retry_if_exception(self.retriable), reraise=True,
            sleep=pause, before_sleep=before_sleep)


class _stop_when(stop_base):  # noqa: N801 (tenacity's naming of stop strategies)
    def __init__(self, condition: Callable[[], bool]) -> None:
        self._condition = condition

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        return self._condition()


# -- the policies, one per retrying component -------------------------------------------------------------


def fetcher(*, refresh_leader_backoff_ms: int, max_s: float, min_s: float) -> RetryPolicy:
    """A fetcher runner after connection or partition errors: exponential from refresh.leader.backoff.ms
    (at least ``min_s``, so a zero does not spin), capped at ``max_s``, plus up to one initial backoff of
    jitter so runners sharing a dead broker do not retry in lockstep."""
    initial = max(refresh_leader_backoff_ms / 1000.0, min_s)
    return RetryPolicy("consumer.fetcher", tenacity.wait_exponential(
        multiplier=initial, min=initial, max=max(initial, max_s)) + wait_uniform(0, initial))


def producer_send(*, retries: int, retry_backoff_ms: int, retry_backoff_max_ms: int) -> RetryPolicy:
    """A failed produce batch: retries (Kafka's ``retries``) times, exponential from retry.backoff.ms up to
    retry.backoff.max.ms, with 20% jitter so producers do not retry in lockstep."""
    backoff = retry_backoff_ms / 1000.0
    return RetryPolicy("producer.send", tenacity.wait_exponential(
        multiplier=backoff, min=backoff, max=max(backoff, retry_backoff_max_ms / 1000.0))
        + wait_uniform(0, backoff * 0.2), max_attempts=retries + 1)


def broker_registration(*, deadline_s: float = 30.0) -> RetryPolicy:
    """The broker's /brokers/ids node while ZooKeeper is unreachable: exponential from 0.1 s to 2 s."""
    return RetryPolicy("broker.registration", tenacity.wait_exponential(multiplier=0.1, max=2),
                       deadline_s=deadline_s)


def replica_fetch(*, replica_fetch_backoff_ms: int) -> RetryPolicy:
    """A broker's replica fetcher after a failed or empty fetch round: every replica.fetch.backoff.ms, for
    as long as the partition follows that leader (Kafka's ReplicaFetcherThread backs off the same way)."""
    return RetryPolicy("broker.replica_fetch", tenacity.wait_fixed(replica_fetch_backoff_ms / 1000.0))


def replica_role_retry(*, backoff_s: float = 1.0) -> RetryPolicy:
    """A replica whose role could not be taken (its log failed to open or truncate): the broker
    reconciles its roles again after ``backoff_s``, and on every metadata change before that."""
    return RetryPolicy("broker.replica_role", tenacity.wait_fixed(backoff_s))


def zookeeper_follower(component: str, *, backoff_s: float = 1.0) -> RetryPolicy:
    """A broker thread or task that follows ZooKeeper (``component``: the metadata watcher, the controller,
    the ACL cache, the topic admin) after a failed pass: again after ``backoff_s``, for as long as it fails
    (the next pass reads everything again, so nothing is lost by waiting)."""
    return RetryPolicy(f"broker.{component}", tenacity.wait_fixed(backoff_s))


def consumer_registration(*, rebalance_backoff_ms: int) -> RetryPolicy:
    """A consumer re-registering after session loss, until ZooKeeper is back: every rebalance.backoff.ms."""
    return RetryPolicy("consumer.registration", tenacity.wait_fixed(rebalance_backoff_ms / 1000.0))


def rebalance_attempts(*, rebalance_backoff_ms: int, rebalance_max_retries: int) -> RetryPolicy:
    """Attempts of one rebalance round: rebalance.max.retries of them, rebalance.backoff.ms (+-20%) apart,
    as in Kafka 0.8."""
    return RetryPolicy("consumer.rebalance", wait_jittered(tenacity.wait_fixed(rebalance_backoff_ms / 1000.0)),
                       max_attempts=rebalance_max_retries)


def rebalance_rounds(*, rebalance_backoff_ms: int, max_s: float) -> RetryPolicy:
    """Rounds after a FAILED rebalance: 2x, 4x, ... rebalance.backoff.ms (+-20%), capped at ``max_s``; a
    member waiting for its peers keeps trying."""
    backoff = rebalance_backoff_ms / 1000.0
    return RetryPolicy("consumer.rebalance.rounds",
                       wait_jittered(tenacity.wait_exponential(multiplier=2 * backoff, max=max_s)))


def offsets_commit(*, offsets_channel_backoff_ms: int, offsets_commit_max_retries: int) -> RetryPolicy:
    """An OffsetCommit over the offsets channel. A frame that did not decode (ProtocolError) is retried
    too: the channel is rebuilt before the next attempt."""
    return RetryPolicy("offsets.commit", tenacity.wait_fixed(offsets_channel_backoff_ms / 1000.0),
                       max_attempts=offsets_commit_max_retries + 1, also=(ProtocolError,))


def offsets_fetch(*, offsets_channel_backoff_ms: int, deadline_ms: int) -> RetryPolicy:
    """An OffsetFetch over the offsets channel, until ``deadline_ms`` (ProtocolError as in offsets_commit)."""
    return RetryPolicy("offsets.fetch", tenacity.wait_fixed(offsets_channel_backoff_ms / 1000.0),
                       deadline_s=deadline_ms / 1000.0, also=(ProtocolError,))


SPARK_FAILOVER_S = 60.0
"""How long the Spark source waits out a partition without a reachable leader: a SIGKILLed leader is
replaced only once its ZooKeeper session expires (the broker's zookeeper.session.timeout.ms, 18 s by
default), then elected; Spark's Kafka source waits 120 s (spark.network.timeout)."""


def spark_list_offsets(*, backoff_s: float = 0.2, max_s: float = 2.0,
                       deadline_s: float = SPARK_FAILOVER_S) -> RetryPolicy:
    """ListOffsets from a Spark driver: doubled per attempt up to ``max_s``, through a leader failover."""
    return RetryPolicy("spark.list_offsets", tenacity.wait_exponential(multiplier=backoff_s, max=max_s),
                       deadline_s=deadline_s)


def spark_fetch(*, backoff_s: float = 0.1, max_s: float = 2.0, deadline_s: float = SPARK_FAILOVER_S) -> RetryPolicy:
    """A Spark task's fetch of one offset range: doubled per attempt up to ``max_s``, through a leader
    failover."""
    return RetryPolicy("spark.fetch", tenacity.wait_exponential(multiplier=backoff_s, max=max_s),
                       deadline_s=deadline_s)


def admin_reader(*, attempts: int = 20, backoff_s: float = 0.5) -> RetryPolicy:
    """``metaq consume``'s partition reader after a broker error: every ``backoff_s``, about 10 s in all."""
    return RetryPolicy("admin.reader", tenacity.wait_fixed(backoff_s), max_attempts=attempts)


def admin_list_offsets(*, backoff_s: float = 0.2, deadline_s: float = 5.0) -> RetryPolicy:
    """The ops tools' ListOffsets for a partition answered with a retriable error (a new leader's
    OFFSET_NOT_AVAILABLE until its high watermark catches up, a moved leader): every ``backoff_s``."""
    return RetryPolicy("admin.list_offsets", tenacity.wait_fixed(backoff_s), deadline_s=deadline_s)
