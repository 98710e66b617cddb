"""The Kafka error-code registry: one class per code, with the properties clients branch on."""

from __future__ import annotations

import pytest

from metaq import errors
from metaq.errors import ErrorCode, for_code


@pytest.mark.parametrize("code", [c for c in ErrorCode if c is not ErrorCode.NONE], ids=lambda c: c.name)
def test_every_error_code_has_its_class(code: ErrorCode) -> None:
    cls = for_code(code)
    assert cls.code == code and cls.message == code.name
    assert issubclass(cls, errors.BrokerResponseError)


def test_an_unregistered_code_keeps_its_number() -> None:
    cls = for_code(999)
    assert cls.code == 999 and cls.message == "ERROR_999"
    assert issubclass(cls, errors.UnknownServerError) and not cls.retriable


def test_leader_errors_ask_for_new_metadata() -> None:
    stale = {c for c in ErrorCode if c is not ErrorCode.NONE and for_code(c).invalid_metadata}
    assert stale == {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
                     ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.UNKNOWN_TOPIC_ID,
                     ErrorCode.INCONSISTENT_TOPIC_ID, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.REPLICA_NOT_AVAILABLE,
                     ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                     ErrorCode.ELECTION_NOT_NEEDED}
    assert all(for_code(c).retriable for c in stale)


def test_coordinator_errors_ask_for_the_coordinator_again() -> None:
    moved = {c for c in ErrorCode if c is not ErrorCode.NONE and for_code(c).group_coordinator}
    assert moved == {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                     ErrorCode.NOT_COORDINATOR}
    assert all(for_code(c).retriable for c in moved)


def test_raise_for_code_names_the_code_and_context() -> None:
    errors.raise_for_code(0, "nothing")
    with pytest.raises(errors.NotCoordinatorError, match=r"NOT_COORDINATOR \(16\) for group g"):
        errors.raise_for_code(ErrorCode.NOT_COORDINATOR, "group g")


def test_errors_that_moved_into_the_tree_are_metaq_errors() -> None:
    moved = [errors.KafkaOffsetsUnavailable, errors.CoordinatorError, errors.ConsumerRebalanceFailedError,
             errors.ConsumerTimeoutError, errors.DataLossError]
    assert all(issubclass(cls, errors.MetaqError) for cls in moved)


def test_coordinator_error_names_its_code() -> None:
    error = errors.CoordinatorError(ErrorCode.NOT_COORDINATOR, "for group g")
    assert str(error) == "NOT_COORDINATOR (16) for group g" and error.code == 16 and error.retriable
