"""A fatal error (a refused login to the offsets coordinator) ends a rebalance at its first attempt; a
retriable one is tried rebalance.max.retries times (real ZooKeeper, an offset store that fails)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from integration_tests.rebalance_fakes import STATE, FakeFetcher, FakeSubscription
from metaq.consumer.config import ConsumerConfig
from metaq.consumer.offset_store import TopicPartition, ZooKeeperOffsetStore
from metaq.consumer.rebalance import ZKRebalancerListener
from metaq.consumer.zk_member_state import FAILED
from metaq.errors import (
    AuthenticationError,
    BrokerConnectionError,
    ConsumerRebalanceFailedError,
    ConsumerRebalanceRefusedError,
    MetaqError,
    SaslAuthenticationFailedError,
)
from zk_layout import BrokerInfo, TopicCount, ZkLayout


class _FailingStore(ZooKeeperOffsetStore):
    def __init__(self, layout: ZkLayout, error: MetaqError) -> None:
        super().__init__(layout, "g")
        self.error = error
        self.calls = 0

    def take_ownership(self, partitions: Mapping[TopicPartition, str]) -> dict[TopicPartition, int | None]:
        self.calls += 1
        raise self.error


@pytest.mark.parametrize(("error", "attempts"), [
    (SaslAuthenticationFailedError("SASL_AUTHENTICATION_FAILED (58): broker refused 'etl'"), 1),
    (BrokerConnectionError("cannot connect to broker 127.0.0.1:1"), 3),
])
def test_fatal_errors_are_not_retried(zk_layout: ZkLayout, error: MetaqError, attempts: int) -> None:
    zk_layout.register_broker(BrokerInfo.plaintext(0, "127.0.0.1", 9092))
    zk_layout.create_topic("t", {0: [0]}, {0: STATE})
    config = ConsumerConfig.from_properties({"group.id": "g", "zookeeper.connect": "unused:2181",
                                             "rebalance.backoff.ms": 10, "rebalance.max.retries": 3,
                                             "auto.commit.enable": False})
    zk_layout.register_consumer("g", "c1", TopicCount(subscription={"t": 1}))
    store = _FailingStore(zk_layout, error)
    failures: list[ConsumerRebalanceFailedError] = []
    listener = ZKRebalancerListener(config, zk_layout, "c1", FakeSubscription(), FakeFetcher(), store,
                                    on_failure=failures.append)
    with pytest.raises(ConsumerRebalanceFailedError) as raised:
        listener.synced_rebalance()
    assert store.calls == attempts
    assert listener.state == FAILED and failures == [raised.value]
    fatal = isinstance(error, AuthenticationError)
    assert isinstance(raised.value, AuthenticationError) == fatal
    assert isinstance(raised.value, ConsumerRebalanceRefusedError) == fatal and raised.value.retriable != fatal
    assert (listener._retry_at is None) == fatal  # no retry timer after a refused login
    assert zk_layout.owners("g") == {}  # the claim was undone either way
