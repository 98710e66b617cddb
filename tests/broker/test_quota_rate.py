"""The windowed rate, throttle time, quota precedence and replication throttle parsing of metaq/broker/quota,
checked against the figures of Kafka's own tests (docs/quotas.md)."""

from __future__ import annotations

import asyncio

import pytest

from metaq.broker.quota.clients import ClientQuotas
from metaq.broker.quota.entities import DEFAULT, PRODUCER_BYTE_RATE, QuotaKey, quota_values, resolve
from metaq.broker.quota.rate import WindowConfig, WindowedRate, throttle_time_ms
from metaq.broker.quota.replication import ReplicationQuota, ThrottledPartitions, parse_throttled_replicas
from metaq.broker.quota.throttling import Caller, Throttle, TimedSteps, client_throttles
from metaq.errors import ConfigError
from metaq.protocol.apis import ApiKey
from zk_layout.quotas import ClientQuotaEntity, broker_of_change, entity_of_change

TEN_WINDOWS = WindowConfig(samples=10, window_ms=1000)


def test_a_first_value_is_spread_over_samples_minus_one_windows() -> None:
    rate = WindowedRate(WindowConfig())  # 11 samples of 1 s: the rate divides by at least 10 s
    rate.record(1000, 0)
    assert rate.window_ms(0) == 10_000
    assert rate.measure(0) == pytest.approx(100.0)


def test_kafka_quota_violation_figures() -> None:
    """ClientQuotaManagerTest.testQuotaViolation: 500 B/s, ten 400-byte records a second apart are within
    it; a 2300-byte spike half a window later is throttled for (600 - 500) / 500 * 10.5 s = 2100 ms."""
    quotas = ClientQuotas(PRODUCER_BYTE_RATE, WindowConfig())  # Kafka's defaults: 11 samples of 1 s
    quotas.update({ClientQuotaEntity(None, DEFAULT): {PRODUCER_BYTE_RATE: 500.0}})
    now = 0
    for _ in range(10):
        assert quotas.record("ANONYMOUS", "unknown", 400, now) == 0
        now += 1000
    now += 500
    assert quotas.record("ANONYMOUS", "unknown", 2300, now) == 2100
    now += 2100  # the throttle is served
    for _ in range(10):  # the spike rolls out of the window
        quotas.record("ANONYMOUS", "unknown", 400, now)
        now += 1000
    assert quotas.record("ANONYMOUS", "unknown", 0, now) == 0


def test_unrecord_takes_bytes_back() -> None:
    quotas = ClientQuotas(PRODUCER_BYTE_RATE, TEN_WINDOWS)
    quotas.update({ClientQuotaEntity(None, DEFAULT): {PRODUCER_BYTE_RATE: 100.0}})
    assert quotas.record("u", "c", 5000, 0) > 0
    quotas.unrecord("u", "c", 5000, 0)
    assert quotas.record("u", "c", 0, 0) == 0


def test_request_quota_throttle_is_capped_at_one_window() -> None:
    quotas = ClientQuotas("request_percentage", TEN_WINDOWS, max_throttle_ms=1000)
    quotas.update({ClientQuotaEntity("u", None): {"request_percentage": 1.0}})
    assert quotas.record("u", "c", 10_000.0, 0) == 1000


def test_throttle_time_formula_and_rounding() -> None:
    assert throttle_time_ms(100.0, 100.0, 10_000) == 0
    assert throttle_time_ms(150.0, 100.0, 10_000) == 5000
    assert throttle_time_ms(100.05, 100.0, 10) == 0  # 0.005 ms rounds down
    assert throttle_time_ms(100.5, 100.0, 1000) == 5  # 5 ms exactly, Java's Math.round rounds halves up


def test_simple_rate_needs_only_one_window() -> None:
    rate = WindowedRate(WindowConfig(), simple=True)
    rate.record(1000, 0)
    assert rate.measure(0) == pytest.approx(1000.0)
    assert rate.measure(2000) == pytest.approx(500.0)


def test_old_samples_expire() -> None:
    rate = WindowedRate(TEN_WINDOWS)
    rate.record(10_000, 0)
    assert rate.measure(10_000) == 0.0  # untouched for samples * window: reset


@pytest.mark.parametrize(("configured", "expected_key"), [
    (ClientQuotaEntity("alice", "app"), QuotaKey("alice", "app")),
    (ClientQuotaEntity("alice", DEFAULT), QuotaKey("alice", "app")),
    (ClientQuotaEntity("alice", None), QuotaKey("alice", "")),
    (ClientQuotaEntity(DEFAULT, "app"), QuotaKey("alice", "app")),
    (ClientQuotaEntity(DEFAULT, DEFAULT), QuotaKey("alice", "app")),
    (ClientQuotaEntity(DEFAULT, None), QuotaKey("alice", "")),
    (ClientQuotaEntity(None, "app"), QuotaKey("", "app")),
    (ClientQuotaEntity(None, DEFAULT), QuotaKey("", "app")),
])
def test_each_level_of_kafkas_precedence(configured: ClientQuotaEntity, expected_key: QuotaKey) -> None:
    resolved = resolve({configured: {PRODUCER_BYTE_RATE: 7.0}}, PRODUCER_BYTE_RATE, "alice", "app")
    assert (resolved.key, resolved.bound) == (expected_key, 7.0)


def test_the_more_specific_entity_wins() -> None:
    configured = {
        ClientQuotaEntity(None, "app"): {PRODUCER_BYTE_RATE: 1.0},
        ClientQuotaEntity(DEFAULT, None): {PRODUCER_BYTE_RATE: 2.0},
        ClientQuotaEntity("alice", None): {PRODUCER_BYTE_RATE: 3.0},
        ClientQuotaEntity("alice", "app"): {"consumer_byte_rate": 4.0},  # another type: not this one's
    }
    assert resolve(configured, PRODUCER_BYTE_RATE, "alice", "app").bound == 3.0
    assert resolve(configured, PRODUCER_BYTE_RATE, "bob", "app").bound == 2.0
    assert resolve(configured, PRODUCER_BYTE_RATE, "bob", "other").bound == 2.0
    assert resolve({}, PRODUCER_BYTE_RATE, "bob", "other").bound is None


def test_quota_values_keep_quota_keys_only() -> None:
    assert quota_values({"producer_byte_rate": "1048576", "SCRAM-SHA-256": "salt=...", "consumer_byte_rate": "x"}) \
        == {"producer_byte_rate": 1048576.0}


def test_notification_entities() -> None:
    assert entity_of_change("users/alice/clients/%3Cdefault%3E") == ClientQuotaEntity("alice", "<default>")
    assert entity_of_change("users/<default>") == ClientQuotaEntity(DEFAULT, None)
    assert entity_of_change("clients/my%20app") == ClientQuotaEntity(None, "my app")
    assert entity_of_change("topics/t") is None
    assert broker_of_change("brokers/<default>") == DEFAULT
    assert broker_of_change("brokers/1") == "1"


def test_throttled_replicas_of_this_broker() -> None:
    assert parse_throttled_replicas("*", 1) == ThrottledPartitions(every=True)
    assert parse_throttled_replicas("0:1,1:2,2:1", 1).partitions == frozenset({0, 2})
    with pytest.raises(ConfigError):
        parse_throttled_replicas("0-1", 1)


def test_replication_quota_holds_back_only_throttled_out_of_sync_replicas() -> None:
    quota = ReplicationQuota("follower", WindowConfig())
    quota.set_bound(1000.0)
    quota.set_throttled("t", ThrottledPartitions(partitions=frozenset({0})))
    quota.record(5000, 0)  # SimpleRate over one window: 5000 B/s
    assert quota.holds_back("t", 0, in_sync=False, now_ms=0)
    assert not quota.holds_back("t", 0, in_sync=True, now_ms=0)
    assert not quota.holds_back("t", 1, in_sync=False, now_ms=0)
    assert not quota.holds_back("t", 0, in_sync=False, now_ms=6000)  # 5000 B over 6 s: under the bound


def test_kip219_versions_throttle_on_the_client_older_ones_are_delayed() -> None:
    assert client_throttles(ApiKey.PRODUCE, 6) and not client_throttles(ApiKey.PRODUCE, 5)
    assert client_throttles(ApiKey.FETCH, 8) and not client_throttles(ApiKey.FETCH, 7)
    assert Throttle(500, client_side=True).mute_s == 0.5 and Throttle(500, client_side=True).delay_s == 0
    assert Throttle(500, client_side=False).delay_s == 0.5 and Throttle(500, client_side=False).mute_s == 0


def test_caller_is_the_principal_name() -> None:
    assert Caller.of("User:ANONYMOUS", None) == Caller("ANONYMOUS", "")
    assert Caller.of("User:alice", "app") == Caller("alice", "app")


def test_timed_steps_count_running_time_not_waiting_time() -> None:
    async def handler() -> int:
        sum(range(200_000))
        await asyncio.sleep(0.2)
        return 7

    async def main() -> tuple[int, int]:
        timed = TimedSteps(handler())
        return await timed, timed.ns

    value, ns = asyncio.run(main())
    assert value == 7
    assert 0 < ns < 150_000_000  # the 200 ms sleep is not counted
