"""``/latest_producer_id_block``: the blocks of producer ids brokers hand to idempotent producers (part of
:class:`zk_layout.store.ZkLayout`).

As ZooKeeper-mode Kafka's ``ZkProducerIdManager.getNewProducerIdBlock``: read the node and its version, write the
next block (``{"version":1,"broker":B,"block_start":"S","block_end":"E"}``, the ids as strings) conditionally on
that version, and read again if another broker won the race. A block is never handed out twice, so producer ids
stay unique across the cluster and across restarts (see docs/zookeeper-layout.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kazoo.exceptions import BadVersionError, NodeExistsError

from metaq.errors import MalformedNodeError, ZooKeeperError
from zk_layout import paths
from zk_layout._nodes import _Nodes

PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
_MAX_PRODUCER_ID = 2**63 - 1


@dataclass(frozen=True)
class ProducerIdBlock:
    """Producer ids ``first..last`` (inclusive), claimed by ``broker``."""

    broker: int
    first: int
    last: int

    def encode(self) -> bytes:
        body = {"version": 1, "broker": self.broker, "block_start": str(self.first), "block_end": str(self.last)}
        return json.dumps(body, separators=(",", ":")).encode("utf-8")

    @classmethod
    def decode(cls, path: str, raw: bytes) -> ProducerIdBlock:
        try:
            body = json.loads(raw.decode("utf-8"))
            return cls(int(body["broker"]), int(body["block_start"]), int(body["block_end"]))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise MalformedNodeError(path, raw, f"not a producer id block ({e})") from e


class _ProducerIds(_Nodes):
    def latest_producer_id_block(self) -> ProducerIdBlock | None:
        """The last block claimed by any broker, or None if none was yet."""
        node = self._read(paths.LATEST_PRODUCER_ID_BLOCK)
        if node is None or not node[0]:
            return None
        return ProducerIdBlock.decode(self.full_path(paths.LATEST_PRODUCER_ID_BLOCK), node[0])

    def claim_producer_id_block(self, broker_id: int, size: int = PRODUCER_ID_BLOCK_SIZE) -> ProducerIdBlock:
        """Claim the block after the latest one (the first block starts at 0) with a conditional write; a
        concurrent claim by another broker makes this one read again and claim the next."""
        path = paths.LATEST_PRODUCER_ID_BLOCK
        while True:
            node = self._read(path)
            first = 0
            if node is not None and node[0]:
                latest = ProducerIdBlock.decode(self.full_path(path), node[0])
                if latest.last > _MAX_PRODUCER_ID - size:
                    raise ZooKeeperError(f"{self.full_path(path)}: producer ids are exhausted ({latest})")
                first = latest.last + 1
            block = ProducerIdBlock(broker_id, first, first + size - 1)
            with self._translated("write", path):
                try:
                    if node is None:
                        self._client.create(path, block.encode(), acl=self._acl(path), makepath=True)
                    else:
                        self._client.set(path, block.encode(), version=node[1].version)
                    return block
                except (NodeExistsError, BadVersionError):
                    continue  # another broker claimed a block meanwhile
