"""An idempotent producer's identity: its producer id and epoch, and the next sequence number per partition.

Used by the sender thread only. The producer id comes from InitProducerId (a broker hands out ids from blocks
claimed in ZooKeeper, unique across the cluster). Each batch gets the next sequence of its partition when it is
first sent and keeps it through its retries, so the broker deduplicates a resend whose answer was lost and
refuses a batch that would land out of order (docs/delivery-guarantees.md, "Idempotent producers"). The accumulator
sends one batch per partition at a time, so batches get their sequences in send() order.

A batch that fails for good leaves its partition's sequence uncertain (it may or may not be in the log), so the
producer then takes a new producer id, whose sequences start again at 0, as Kafka's producer bumps its epoch
(KIP-360). Batches already stamped with the old id keep it through their own retries.
"""

from __future__ import annotations

import logging

from kafka.protocol.producer import InitProducerIdRequest

from metaq.client.connection import BrokerConnection
from metaq.errors import raise_for_code
from metaq.producer.accumulator import ProducerBatch, TopicPartition
from metaq.protocol.batches import increment_sequence

log = logging.getLogger(__name__)

NO_PRODUCER_ID = -1


class ProducerIdentity:
    """``identity.stamp(batch)`` before a batch's first send; ``identity.failed(batch)`` when it fails for good."""

    def __init__(self) -> None:
        self.producer_id = NO_PRODUCER_ID
        self.epoch = -1
        self._next_sequence: dict[TopicPartition, int] = {}

    @property
    def known(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID

    def init(self, conn: BrokerConnection, timeout_s: float) -> None:
        """Ask the broker behind ``conn`` (connected) for a producer id; raises its error (a
        BrokerResponseError, retriable or not) or a connection error."""
        response = conn.send_async(InitProducerIdRequest, {"transactional_id": None,
                                                           "transaction_timeout_ms": 60000}).result(timeout_s)
        assert response is not None
        raise_for_code(response.error_code, "InitProducerId")
        self.producer_id, self.epoch = int(response.producer_id), int(response.producer_epoch)
        self._next_sequence.clear()
        log.info("idempotent producer: producer id %d, epoch %d", self.producer_id, self.epoch)

    def stamp(self, batch: ProducerBatch) -> None:
        """Give a batch about to be sent for the first time the partition's next sequence (no-op on a retry)."""
        if batch.producer_id != NO_PRODUCER_ID:
            return
        sequence = self._next_sequence.get(batch.tp, 0)
        batch.stamp_producer(self.producer_id, self.epoch, sequence)
        self._next_sequence[batch.tp] = increment_sequence(sequence, batch.record_count)

    def failed(self, batch: ProducerBatch) -> None:
        """A batch failed for good: if it carried the current id, take a new one before the next send."""
        if batch.producer_id == self.producer_id and self.known:
            log.warning("idempotent producer: a batch to %s-%d failed for good; taking a new producer id",
                        batch.tp.topic, batch.tp.partition)
            self.producer_id = NO_PRODUCER_ID
