"""What the controller answers to the admin requests it serves from any thread (ElectLeaders,
AlterPartitionReassignments): a result per partition, or :class:`NotControllerError` when this broker is not the
controller.
"""

from __future__ import annotations

from dataclasses import dataclass

from metaq.errors import ErrorCode, MetaqError

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class PartitionResult:
    """One partition's answer to ElectLeaders or AlterPartitionReassignments: an error code (0: done) and why."""

    error: int
    message: str | None = None


NO_PARTITION = PartitionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")


class NotControllerError(MetaqError):
    """This broker is not the controller: the client must ask the one in ``/controller`` (NOT_CONTROLLER)."""

    retriable = True
