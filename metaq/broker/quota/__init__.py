"""Client quotas and replication throttles (docs/quotas.md): the windowed rate (:mod:`.rate`), quota entities
and Kafka's precedence (:mod:`.entities`), one quota type's rates (:mod:`.clients`), the request path
(:mod:`.throttling`, :mod:`.request_path`), the replication throttles (:mod:`.replication`) and their
configuration from ZooKeeper (:mod:`.store`)."""
