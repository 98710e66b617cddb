"""metaq.retry: the named policies' waits, stops and retriable errors (pure logic: fake sleep and clock)."""

from __future__ import annotations

import threading

import pytest
import tenacity

from metaq import retry
from metaq.errors import (
    BrokerConnectionError,
    ConfigError,
    CoordinatorError,
    MessageSizeTooLargeError,
    MetaqError,
    ProtocolError,
)


class FakeTime:
    """A clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


class Flaky:
    """Raises each of ``errors`` in turn, then returns "ok"."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def test_is_retriable_follows_the_error_class() -> None:
    assert retry.is_retriable(BrokerConnectionError("x"))
    assert retry.is_retriable(CoordinatorError(15, "x"))
    assert not retry.is_retriable(MessageSizeTooLargeError("x"))
    assert not retry.is_retriable(ConfigError("x"))
    assert not retry.is_retriable(ValueError("x"))


def test_call_retries_retriable_errors_with_the_policy_waits() -> None:
    fake = FakeTime()
    policy = retry.RetryPolicy("t", tenacity.wait_fixed(0.5), max_attempts=3)
    fn = Flaky(BrokerConnectionError("a"), BrokerConnectionError("b"))
    assert policy.call(fn, sleep=fake.sleep, clock=fake.clock) == "ok"
    assert fn.calls == 3
    assert fake.sleeps == [0.5, 0.5]


def test_call_raises_the_last_error_when_attempts_are_used_up() -> None:
    fake = FakeTime()
    policy = retry.RetryPolicy("t", tenacity.wait_fixed(0.5), max_attempts=2)
    fn = Flaky(BrokerConnectionError("a"), BrokerConnectionError("b"), BrokerConnectionError("c"))
    with pytest.raises(BrokerConnectionError, match="b"):
        policy.call(fn, sleep=fake.sleep, clock=fake.clock)
    assert fn.calls == 2


@pytest.mark.parametrize("error", [MessageSizeTooLargeError("fatal"), ProtocolError("fatal"), ValueError("fatal")])
def test_call_does_not_retry_what_is_not_retriable(error: BaseException) -> None:
    fake = FakeTime()
    fn = Flaky(error)
    with pytest.raises(type(error)):
        retry.RetryPolicy("t", tenacity.wait_fixed(1), max_attempts=5).call(fn, sleep=fake.sleep, clock=fake.clock)
    assert fn.calls == 1
    assert fake.sleeps == []


def test_also_adds_classes_to_the_retriable_ones() -> None:
    fake = FakeTime()
    policy = retry.offsets_commit(offsets_channel_backoff_ms=100, offsets_commit_max_retries=2)
    fn = Flaky(ProtocolError("garbled"), CoordinatorError(16, "moved"))
    assert policy.call(fn, sleep=fake.sleep, clock=fake.clock) == "ok"
    assert fake.sleeps == [0.1, 0.1]


def test_deadline_is_measured_on_the_given_clock() -> None:
    fake = FakeTime()
    policy = retry.offsets_fetch(offsets_channel_backoff_ms=1000, deadline_ms=2500)
    fn = Flaky(*[CoordinatorError(15, str(n)) for n in range(10)])
    with pytest.raises(CoordinatorError):
        policy.call(fn, sleep=fake.sleep, clock=fake.clock)
    assert fn.calls == 4  # at 0, 1, 2 and 3 s: the last attempt starts before the deadline, none after it
    assert fake.sleeps == [1.0, 1.0, 1.0]


def test_a_set_stop_event_ends_the_retries() -> None:
    fake = FakeTime()
    closing = threading.Event()

    def fn() -> str:
        closing.set()
        raise BrokerConnectionError("x")

    with pytest.raises(BrokerConnectionError):
        retry.broker_registration().call(fn, sleep=fake.sleep, clock=fake.clock, stop_event=closing)
    assert fake.sleeps == []


def test_before_sleep_sees_the_failed_attempt() -> None:
    fake = FakeTime()
    seen: list[tuple[int, str]] = []

    def before_sleep(state: tenacity.RetryCallState) -> None:
        assert state.outcome is not None
        seen.append((state.attempt_number, str(state.outcome.exception())))

    fn = Flaky(BrokerConnectionError("first"))
    retry.broker_registration().call(fn, sleep=fake.sleep, clock=fake.clock, before_sleep=before_sleep)
    assert seen == [(1, "first")]


def test_delay_after_gives_up_when_exhausted_or_not_retriable() -> None:
    policy = retry.producer_send(retries=2, retry_backoff_ms=100, retry_backoff_max_ms=1000)
    assert [policy.delay_after(n, BrokerConnectionError("x")) is not None for n in (1, 2, 3)] == [True, True, False]
    assert policy.delay_after(1, MessageSizeTooLargeError("x")) is None
    assert policy.exhausted(3) and not policy.exhausted(2)


def test_a_policy_without_limits_never_gives_up() -> None:
    policy = retry.consumer_registration(rebalance_backoff_ms=2000)
    assert not policy.exhausted(10_000)
    assert policy.delay(1) == policy.delay(50) == 2.0


def test_fetcher_backoff_grows_is_capped_and_never_spins() -> None:
    policy = retry.fetcher(refresh_leader_backoff_ms=200, max_s=1.0, min_s=0.01)
    assert 0.2 <= policy.delay(1) <= 0.4
    assert 0.4 <= policy.delay(2) <= 0.6
    assert all(1.0 <= policy.delay(n) <= 1.2 for n in range(4, 40))
    assert retry.fetcher(refresh_leader_backoff_ms=0, max_s=1.0, min_s=0.01).delay(1) >= 0.01


def test_rebalance_attempts_are_backoff_apart_within_twenty_percent() -> None:
    policy = retry.rebalance_attempts(rebalance_backoff_ms=2000, rebalance_max_retries=4)
    assert all(1.6 <= policy.delay(n) <= 2.4 for n in range(1, 5))
    assert policy.exhausted(4) and not policy.exhausted(3)


def test_rebalance_rounds_double_from_twice_the_backoff_up_to_the_cap() -> None:
    exact = retry.wait_jittered(tenacity.wait_exponential(multiplier=2 * 0.5, max=30.0), uniform=lambda lo, hi: 1.0)
    policy = retry.RetryPolicy("rounds", exact)
    assert [policy.delay(n) for n in (1, 2, 3)] == [1.0, 2.0, 4.0]
    assert policy.delay(20) == 30.0
    jittered = retry.rebalance_rounds(rebalance_backoff_ms=500, max_s=30.0)
    assert all(0.8 <= jittered.delay(1) <= 1.2 for _ in range(20))
    assert all(24.0 <= jittered.delay(20) <= 36.0 for _ in range(20))


def test_jitter_scales_the_inner_wait() -> None:
    low = retry.wait_jittered(tenacity.wait_fixed(10), uniform=lambda lo, hi: lo)
    high = retry.wait_jittered(tenacity.wait_fixed(10), uniform=lambda lo, hi: hi)
    assert retry.RetryPolicy("low", low).delay(1) == 8.0
    assert retry.RetryPolicy("high", high).delay(1) == 12.0


def test_spark_policies_double_per_attempt() -> None:
    assert [retry.spark_list_offsets().delay(n) for n in (1, 2, 3)] == [0.2, 0.4, 0.8]
    assert [retry.spark_fetch().delay(n) for n in (1, 2, 6)] == [0.1, 0.2, 2.0]
    for policy in (retry.spark_list_offsets(), retry.spark_fetch()):  # a failover takes the broker's session
        assert not policy.exhausted(1000, elapsed_s=59.0) and policy.exhausted(2, elapsed_s=60.0)


def test_admin_reader_waits_a_fixed_backoff() -> None:
    policy = retry.admin_reader()
    assert policy.delay(1) == policy.delay(19) == 0.5
    assert policy.exhausted(20) and not policy.exhausted(19)


def test_every_named_policy_retries_only_metaq_retriable_errors() -> None:
    policies = [
        retry.fetcher(refresh_leader_backoff_ms=1, max_s=1, min_s=0.01),
        retry.producer_send(retries=1, retry_backoff_ms=1, retry_backoff_max_ms=1),
        retry.broker_registration(), retry.consumer_registration(rebalance_backoff_ms=1),
        retry.rebalance_attempts(rebalance_backoff_ms=1, rebalance_max_retries=1),
        retry.rebalance_rounds(rebalance_backoff_ms=1, max_s=1), retry.spark_list_offsets(), retry.spark_fetch(),
        retry.admin_reader(),
    ]
    for policy in policies:
        assert policy.retriable(BrokerConnectionError("x")), policy.name
        assert not policy.retriable(MetaqError("x")), policy.name
        assert not policy.retriable(ProtocolError("x")), policy.name
    assert len({p.name for p in policies}) == len(policies)
