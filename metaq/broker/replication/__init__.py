"""Replicated partitions (docs/architecture.md, "Replication"): the ZooKeeper-elected controller
(:mod:`.controller`), leader election rules (:mod:`.election`), the leader's high watermark and follower
tracking (:mod:`.partition_state`), replica fetchers (:mod:`.replica_fetcher`) and the broker-side manager
that turns partition state nodes into roles (:mod:`.manager`).

A partition with one replica takes no part in any of it: it behaves exactly as before replication existed.
"""
