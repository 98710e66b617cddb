"""Client quotas on the request path: count what a request costs, answer its throttle time, and say how
the connection honours it (docs/quotas.md).

As Kafka's ``KafkaApis``: a Produce counts its request size against ``producer_byte_rate``; a consumer's
Fetch counts its answer's record bytes against ``consumer_byte_rate`` and, when throttled, answers no
records (the bytes are taken back, ``unrecordQuotaSensor``); every request of a client counts the time its
handler ran against ``request_percentage`` (percent of one thread per second), except a follower's fetch and
the acks=0 Produce (exempt, as Kafka's cluster actions and acks=0). The larger throttle time is reported in
every answer that has ``throttle_time_ms``. Replica fetches are governed by the replication throttles
(metaq/broker/quota/replication.py) instead.

How the connection honours it is :class:`Throttle`: a version that tells the client to back off itself
(KIP-219, Kafka's ``AbstractResponse.shouldClientThrottle``) is answered at once and the connection is
then muted for the throttle time; an older version is answered after the throttle time (the pre-KIP-219
behaviour, for clients that ignore the field). The network layer waits on its connection's own task, so
no other client is held up.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Generator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from metaq.broker.quota.clients import ClientQuotas
from metaq.broker.quota.entities import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE
from metaq.broker.quota.rate import WindowConfig
from metaq.broker.quota.replication import ReplicationQuota
from metaq.protocol.apis import ApiKey

T = TypeVar("T")

# The first version of each API whose client backs off by itself (Kafka 3.9's shouldClientThrottle); an
# API not listed never does (its answers are delayed instead).
CLIENT_THROTTLES_FROM: dict[ApiKey, int] = {
    ApiKey.PRODUCE: 6, ApiKey.FETCH: 8, ApiKey.LIST_OFFSETS: 3, ApiKey.METADATA: 6, ApiKey.OFFSET_COMMIT: 4,
    ApiKey.OFFSET_FETCH: 4, ApiKey.FIND_COORDINATOR: 2, ApiKey.JOIN_GROUP: 3, ApiKey.HEARTBEAT: 2,
    ApiKey.LEAVE_GROUP: 2, ApiKey.SYNC_GROUP: 2, ApiKey.DESCRIBE_GROUPS: 2, ApiKey.LIST_GROUPS: 2,
    ApiKey.API_VERSIONS: 2, ApiKey.CREATE_TOPICS: 3, ApiKey.DELETE_TOPICS: 2, ApiKey.DELETE_RECORDS: 1,
    ApiKey.INIT_PRODUCER_ID: 1, ApiKey.ADD_PARTITIONS_TO_TXN: 1, ApiKey.ADD_OFFSETS_TO_TXN: 1, ApiKey.END_TXN: 1,
    ApiKey.TXN_OFFSET_COMMIT: 1, ApiKey.DESCRIBE_ACLS: 1, ApiKey.CREATE_ACLS: 1, ApiKey.DELETE_ACLS: 1,
    ApiKey.DESCRIBE_CONFIGS: 2, ApiKey.ALTER_CONFIGS: 1, ApiKey.CREATE_PARTITIONS: 1, ApiKey.DELETE_GROUPS: 1,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 0, ApiKey.OFFSET_DELETE: 0,
}

NANOS_TO_PERCENT = 100.0 / 1e9  # Kafka's NanosToPercentagePerSecond: percent of one thread for one second


def client_throttles(api_key: ApiKey, version: int) -> bool:
    """Whether a client of this API version honours ``throttle_time_ms`` itself (KIP-219)."""
    first = CLIENT_THROTTLES_FROM.get(api_key)
    return first is not None and version >= first


@dataclass(frozen=True)
class Throttle:
    """A request's throttle time and how it is applied: ``delay_s`` before its answer is sent (old
    versions), ``mute_s`` after it (KIP-219: nothing more is read from the connection meanwhile)."""

    ms: int = 0
    client_side: bool = True

    @property
    def delay_s(self) -> float:
        return 0.0 if self.client_side else self.ms / 1000.0

    @property
    def mute_s(self) -> float:
        return self.ms / 1000.0 if self.client_side else 0.0


NO_THROTTLE = Throttle()


@dataclass(frozen=True)
class Caller:
    """Whom a request's cost is counted for: the principal's name (``ANONYMOUS`` without authentication)
    and the request header's client id."""

    user: str
    client_id: str

    @classmethod
    def of(cls, principal: str, client_id: str | None) -> Caller:
        _, _, name = principal.partition(":")
        return cls(name or principal, client_id or "")


@dataclass
class Quotas:
    """The broker's quotas: client quotas by type and the two replication throttles."""

    produce: ClientQuotas
    fetch: ClientQuotas
    request: ClientQuotas
    leader: ReplicationQuota
    follower: ReplicationQuota

    @classmethod
    def create(cls, client_window: WindowConfig, replication_window: WindowConfig) -> Quotas:
        return cls(
            produce=ClientQuotas(PRODUCER_BYTE_RATE, client_window),
            fetch=ClientQuotas(CONSUMER_BYTE_RATE, client_window),
            # ClientRequestQuotaManager caps a throttle at one window
            request=ClientQuotas(REQUEST_PERCENTAGE, client_window, max_throttle_ms=client_window.window_ms),
            leader=ReplicationQuota("leader", replication_window),
            follower=ReplicationQuota("follower", replication_window),
        )

    def request_time(self, caller: Caller, handler_ns: int, now_ms: int) -> int:
        """The request-quota throttle time for a handler that ran ``handler_ns``."""
        return self.request.record(caller.user, caller.client_id, handler_ns * NANOS_TO_PERCENT, now_ms)

    def produced(self, caller: Caller, request_bytes: int, now_ms: int) -> int:
        return self.produce.record(caller.user, caller.client_id, request_bytes, now_ms)

    def fetched(self, caller: Caller, response_bytes: int, now_ms: int) -> int:
        return self.fetch.record(caller.user, caller.client_id, response_bytes, now_ms)


@dataclass
class TimedSteps(Generic[T]):
    """Awaits ``inner`` and counts the time its own steps ran (``ns``), not the time it waited: the
    equivalent of Kafka's request handler thread time, which excludes the time a request sits in purgatory
    (a long-polling fetch waits without costing its client's request quota)."""

    inner: Awaitable[T]
    ns: int = field(default=0)

    def __await__(self) -> Generator[Any, Any, T]:
        steps = self.inner.__await__()
        sent: Any = None
        error: BaseException | None = None
        while True:
            started = time.perf_counter_ns()
            try:
                step = steps.throw(error) if error is not None else steps.send(sent)
            except StopIteration as stop:
                return cast(T, stop.value)
            finally:
                self.ns += time.perf_counter_ns() - started
            try:
                sent, error = (yield step), None
            except BaseException as e:  # cancellation and the like go to the handler, as a plain await would
                sent, error = None, e


def now_ms() -> int:
    """The clock of every rate (monotonic, ms)."""
    return int(time.monotonic() * 1000)
