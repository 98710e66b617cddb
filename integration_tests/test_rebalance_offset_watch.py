"""The watch on each owned partition's offset node (an operator's forced reset takes effect at once) must
not make a ZooKeeper connection drop cost a rebalance: the member's own commits fire that watch every
auto.commit.interval.ms, so the check it starts is often in flight when ZooKeeper goes away."""

from __future__ import annotations

from integration_tests.rebalance_fakes import STATE, FakeFetcher, FakeSubscription
from metaq.consumer.config import ConsumerConfig
from metaq.consumer.offset_store import ZooKeeperOffsetStore
from metaq.consumer.rebalance import ZKRebalancerListener
from metaq.consumer.zk_member_state import STABLE
from metaq.errors import ZooKeeperUnavailableError
from metaq.testing.wait import wait_until
from zk_layout import BrokerInfo, FencedOffset, TopicCount, ZkLayout


def test_an_offset_check_cut_by_a_connection_drop_is_made_again_without_a_rebalance(zk_layout: ZkLayout) -> None:
    """Our own commit fires the offset watch; the check it starts fails as the connection drops. That is no
    sign that anyone wrote the node: the member checks again and keeps its partitions, with no rebalance
    (before: the executor's error path scheduled a retry, i.e. a release and re-claim of everything right
    after every ZooKeeper restart)."""
    zk_layout.register_broker(BrokerInfo.plaintext(0, "127.0.0.1", 9092))
    zk_layout.create_topic("t", {p: [0] for p in range(2)}, {p: STATE for p in range(2)})
    config = ConsumerConfig.from_properties({"group.id": "g", "zookeeper.connect": "unused:2181",
                                             "rebalance.backoff.ms": 200, "auto.commit.enable": False})
    zk_layout.register_consumer("g", "c0", TopicCount(subscription={"t": 1}))
    store = ZooKeeperOffsetStore(zk_layout, "g")
    listener = ZKRebalancerListener(config, zk_layout, "c0", FakeSubscription(), FakeFetcher(), store)
    listener.synced_rebalance()
    listener.start()
    try:
        generation = listener.generation
        read = zk_layout.read_fenced_offset
        drops = [ZooKeeperUnavailableError("cannot read the offset node: ConnectionLoss() (injected)")]
        checked: list[tuple[str, int]] = []

        def dropped_once(group: str, topic: str, partition: int, watch: object = None) -> FencedOffset | None:
            if drops:
                raise drops.pop()
            node = read(group, topic, partition, watch=watch)  # type: ignore[arg-type]
            checked.append((topic, partition))
            return node

        zk_layout.read_fenced_offset = dropped_once  # type: ignore[method-assign]
        assert store.commit({("t", 0): 5}).committed  # our own write: it fires the watch
        wait_until(lambda: not drops and ("t", 0) in checked, 30, "the offset nodes to be checked again")
        assert listener.generation == generation, "the member rebalanced over a failed check of its offset nodes"
        assert listener.state == STABLE
        assert zk_layout.owners("g") == {("t", 0): "c0-0", ("t", 1): "c0-0"}
    finally:
        listener.shutdown(commit=False)
