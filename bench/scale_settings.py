"""bench.scale's sizes, modes and limits (see bench/scale.py)."""

from __future__ import annotations

SIZES = ((10, 1_000), (50, 5_000), (100, 10_000))
ZOOKEEPER = "zookeeper/range"
KAFKA_MODES = ("kafka/range", "kafka/cooperative-sticky")
"""group.coordination=kafka, eager and incremental; measured after ZooKeeper at the sizes of KAFKA_SIZES."""
KAFKA_SIZES = ((100, 10_000),)
KAFKA_STEPS = ("_join", "_assign", "_sync", "_fetch_offsets")
"""GroupMember's steps of a round, timed: JoinGroup (waits for every member), the leader's assignment,
SyncGroup (waits for the leader), OffsetFetch of the assigned partitions."""
PROCESSES = 4  # worker processes the members are spread over (see bench/scale.py)
TOPIC_PARTITIONS = 1_000
SETTLE_TIMEOUT_S = 300.0
POLL_S = 0.1
CONFIRM_S = 1.0  # settled means: still settled, with no new rebalance, this long after
