"""KIP-360's InitProducerId with the client's producer id and epoch (docs/transactions.md section 1): the
rules of the transaction coordinator's epoch bump, on states built by hand (the wire is tested in
integration_tests/test_transactions.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from metaq.broker.coordinator.txn_coordinator import TransactionCoordinator, TxnCoordinatorConfig, _expected_id
from metaq.broker.coordinator.txn_state import COMPLETE_COMMIT, MAX_EPOCH, NO_EPOCH, TxnMetadata
from metaq.errors import ErrorCode

PID = 7000


async def _new_id() -> int:
    return PID + 1


def _coordinator() -> TransactionCoordinator:
    unused: Any = None
    return TransactionCoordinator(TxnCoordinatorConfig(0, 1, 900000, 10000, 604800000), unused, unused, unused,
                                  _new_id, unused, lambda _t, _p: None)


def _txn(epoch: int, **extra: Any) -> TxnMetadata:
    return TxnMetadata("t", PID, epoch, 60000, COMPLETE_COMMIT, last_update_ms=0, **extra)


def _bump(txn: TxnMetadata, expected: tuple[int, int] | None) -> TxnMetadata | int:
    return asyncio.run(_coordinator()._bump(txn, 60000, expected, 1))


def test_the_expected_epoch_is_bumped_and_remembered() -> None:
    bumped = _bump(_txn(4), (PID, 4))
    assert isinstance(bumped, TxnMetadata)
    assert (bumped.producer_id, bumped.producer_epoch, bumped.last_producer_epoch) == (PID, 5, 4)
    assert _bump(bumped, (PID, 4)) is bumped  # a retry: the same answer, nothing stored
    assert _bump(bumped, (PID, 3)) == ErrorCode.PRODUCER_FENCED


def test_without_an_expected_epoch_a_new_instance_bumps_and_remembers_nothing() -> None:
    bumped = _bump(_txn(4, last_producer_epoch=3), None)
    assert isinstance(bumped, TxnMetadata)
    assert (bumped.producer_epoch, bumped.last_producer_epoch) == (5, NO_EPOCH)


def test_an_exhausted_epoch_rotates_the_producer_id_and_a_retry_is_recognised() -> None:
    exhausted = MAX_EPOCH - 1
    rotated = _bump(_txn(exhausted), (PID, exhausted))
    assert isinstance(rotated, TxnMetadata)
    assert (rotated.producer_id, rotated.producer_epoch, rotated.previous_producer_id) == (PID + 1, 0, PID)
    assert _expected_id(rotated, (PID, exhausted))  # the old id with its exhausted epoch: a retry
    assert _bump(rotated, (PID, exhausted)) is rotated
    assert not _expected_id(rotated, (PID, exhausted - 1))
    assert not _expected_id(rotated, (PID + 5, 0))
