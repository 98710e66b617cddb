"""What a leader knows about its followers, and the high watermark derived from it (pure logic).

The leader learns each follower's log end offset (LEO) from the fetch offset of the follower's Fetch
requests. The high watermark (HW) is the smallest LEO over the ISR; it never moves back. A follower whose LEO
the leader has not heard since it became leader counts as being at the current HW, so a new leader's HW
stays where it was until every ISR member has fetched once (Kafka does the same).

A follower is caught up at a fetch whose offset reaches the leader's LEO of that moment, or the LEO the
leader had when it answered the follower's previous fetch (Kafka's ``lastCaughtUpTimeMs``): the ISR shrink
(after ``replica.lag.time.max.ms`` without being caught up) uses this time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

UNKNOWN = -1


def high_watermark(current: int, leader_id: int, leader_leo: int, isr: Iterable[int],
                   follower_leos: Mapping[int, int]) -> int:
    """min LEO over the ISR (the leader's own LEO included), never below ``current``."""
    leos = [leader_leo]
    for broker in isr:
        if broker != leader_id:
            leo = follower_leos.get(broker, UNKNOWN)
            leos.append(current if leo == UNKNOWN else leo)
    return max(current, min(leos))


@dataclass
class Follower:
    leo: int = UNKNOWN
    caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_leo: int = UNKNOWN


@dataclass
class LeaderState:
    """One partition this broker leads at ``leader_epoch``."""

    broker_id: int
    leader_epoch: int
    hw: int
    started_ms: int
    epoch_start_offset: int = 0  # the leader's LEO when it became leader at this epoch
    followers: dict[int, Follower] = field(default_factory=dict)

    def record_fetch(self, replica: int, fetch_offset: int, leader_leo: int, now_ms: int) -> None:
        f = self.followers.setdefault(replica, Follower(caught_up_ms=self.started_ms))
        f.leo = fetch_offset
        if fetch_offset >= leader_leo:
            f.caught_up_ms = now_ms
        elif f.last_fetch_leader_leo != UNKNOWN and fetch_offset >= f.last_fetch_leader_leo:
            f.caught_up_ms = max(f.caught_up_ms, f.last_fetch_ms)
        f.last_fetch_ms = now_ms
        f.last_fetch_leader_leo = leader_leo

    def update_hw(self, leader_leo: int, isr: Iterable[int]) -> bool:
        """Recompute the HW; True if it moved."""
        new = high_watermark(self.hw, self.broker_id, leader_leo,
                             isr, {b: f.leo for b, f in self.followers.items()})
        moved = new > self.hw
        self.hw = new
        return moved

    @property
    def epoch_start_unconfirmed(self) -> bool:
        """Whether the HW is still below the offset this epoch began at: the previous leader may have exposed
        offsets up to there, so the latest offset this leader would answer could go backwards (Kafka answers
        ListOffsets with OFFSET_NOT_AVAILABLE meanwhile, see metaq/broker/handlers/list_offsets.py)."""
        return self.hw < self.epoch_start_offset

    def lagging(self, isr: Iterable[int], now_ms: int, max_lag_ms: int) -> list[int]:
        """ISR followers not caught up within ``max_lag_ms`` (to be shrunk out of the ISR)."""
        out = []
        for broker in isr:
            if broker == self.broker_id:
                continue
            caught = self.followers.get(broker, Follower(caught_up_ms=self.started_ms)).caught_up_ms
            if now_ms - caught > max_lag_ms:
                out.append(broker)
        return out

    def caught_up(self, replicas: Iterable[int], isr: Iterable[int]) -> list[int]:
        """Replicas outside the ISR whose LEO reached the HW and this epoch's start offset (Kafka's
        ``isFollowerInSync``: a follower still holding an older epoch's tail does not count), to add back."""
        in_isr = set(isr)
        bar = max(self.hw, self.epoch_start_offset)
        return [b for b in replicas if b not in in_isr and b != self.broker_id
                and b in self.followers and self.followers[b].leo >= bar]
