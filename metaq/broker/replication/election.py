"""The controller's pure decisions: who leads a partition after brokers come or go.

Kafka's rules (ZooKeeper mode): the new leader is the first replica, in assignment order, that is alive and
in the ISR; the ISR loses the dead brokers; every leader change increments ``leader_epoch``. With no live ISR
member the partition goes offline (leader -1) and keeps its ISR, so that any of those brokers, which have
every acknowledged record, can lead again when it returns; ``unclean.leader.election.enable`` instead
takes any live replica, accepting the loss of what only the ISR had.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from zk_layout import PartitionState

NO_LEADER = -1


def elect(
    state: PartitionState,
    replicas: Sequence[int],
    live: Collection[int],
    *,
    controller_epoch: int,
    unclean: bool = False,
) -> PartitionState | None:
    """The state to write after the set of ``live`` brokers changed, or None to leave it as it is. A broker
    no longer among ``replicas`` (a reassignment removed it) counts as dead: out of the ISR, and led over."""
    live_isr = tuple(b for b in state.isr if b in live and b in replicas)
    if state.leader != NO_LEADER and state.leader in live and state.leader in replicas:
        if len(live_isr) == len(state.isr):
            return None
        # a follower died: out of the ISR at once (acks=all must not wait for it), same leader and epoch
        return PartitionState(leader=state.leader, leader_epoch=state.leader_epoch, isr=live_isr,
                              controller_epoch=controller_epoch)
    candidates = [b for b in replicas if b in live and b in state.isr]
    if candidates:
        leader = candidates[0]
        isr = live_isr
    elif unclean and any(b in live for b in replicas):
        leader = next(b for b in replicas if b in live)
        isr = (leader,)
    else:
        if state.leader == NO_LEADER:
            return None  # already offline
        return PartitionState(leader=NO_LEADER, leader_epoch=state.leader_epoch + 1, isr=state.isr,
                              controller_epoch=controller_epoch)
    return PartitionState(leader=leader, leader_epoch=state.leader_epoch + 1, isr=isr,
                          controller_epoch=controller_epoch)


def initial_state(replicas: Sequence[int], live: Collection[int], *, controller_epoch: int) -> PartitionState | None:
    """The first state of a partition that has an assignment but no state node yet (written by a tool that
    leaves leader election to the controller, e.g. Kafka's ``TopicCommand --zookeeper``): Kafka's
    ``PartitionStateMachine.initializeLeaderAndIsrForPartitions`` makes the first live replica, in assignment
    order, the leader and every live replica the ISR, at leader epoch 0. None while no replica is alive (the
    partition stays new until one is)."""
    live_replicas = tuple(b for b in replicas if b in live)
    if not live_replicas:
        return None
    return PartitionState(leader=live_replicas[0], leader_epoch=0, isr=live_replicas,
                          controller_epoch=controller_epoch)


def elect_preferred(state: PartitionState, replicas: Sequence[int], live: Collection[int], *,
                    controller_epoch: int) -> PartitionState | None:
    """Leadership back to the preferred (first) replica if it is alive and in the ISR, else None."""
    preferred = replicas[0] if replicas else NO_LEADER
    if preferred == state.leader or preferred not in live or preferred not in state.isr:
        return None
    return PartitionState(leader=preferred, leader_epoch=state.leader_epoch + 1, isr=state.isr,
                          controller_epoch=controller_epoch)


def imbalanced_brokers(leaders: Mapping[tuple[str, int], tuple[int, Sequence[int]]], live: Collection[int],
                       percentage: int) -> set[int]:
    """Brokers whose share of partitions they prefer (first replica) but do not lead exceeds ``percentage``
    (Kafka's ``leader.imbalance.per.broker.percentage``): ``auto.leader.rebalance.enable`` moves those
    partitions back. ``leaders`` maps each partition to (current leader, replicas)."""
    preferred: dict[int, int] = {}
    displaced: dict[int, int] = {}
    for leader, replicas in leaders.values():
        if not replicas or replicas[0] not in live:
            continue
        preferred[replicas[0]] = preferred.get(replicas[0], 0) + 1
        if leader != replicas[0]:
            displaced[replicas[0]] = displaced.get(replicas[0], 0) + 1
    return {b for b, n in displaced.items() if n * 100 > percentage * preferred[b]}
