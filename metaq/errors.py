"""The one exception hierarchy of metaq.

Every error metaq raises derives from :class:`MetaqError`; third-party errors are translated at the
boundary (``raise ... from e``). Whether retrying can help is a property of the class (``retriable``)::

    MetaqError
    ├── ConfigError                  bad option name or value (fatal)
    ├── ZooKeeperError               ZooKeeper unreachable or refused an operation
    │   ├── ZooKeeperUnavailableError   no connection within the timeout (retriable)
    │   ├── ZooKeeperServerError        the embedded server cannot be found or started
    │   ├── StaleVersionError           a conditional write lost a race (the node changed)
    │   │   └── ControllerMovedError       a zombie controller's fenced write (a newer controller won)
    │   └── MalformedNodeError          a node's data does not parse (names the path)
    ├── ProtocolError                a frame that cannot be decoded or is not allowed (names the frame)
    ├── CorruptRecordError           a record batch failed its size, magic or CRC check
    │   ├── UnsupportedMessageFormatError  magic 0/1 message sets
    │   ├── UnsupportedCompressionError    a codec id that is unknown
    │   └── InvalidRecordError             a batch with a valid CRC whose records or flags are invalid
    ├── BrokerConnectionError        a broker unreachable or the connection broke (retriable)
    ├── AuthenticationError          TLS or SASL refused: fix the settings, retrying cannot help
    │   └── TlsHandshakeError           the broker's certificate did not verify, or the broker refused ours
    ├── StorageError                 the log on disk cannot be read or written
    ├── DeserializationError         a record's key or value does not decode (names topic/partition/offset)
    ├── TopicError
    │   ├── UnknownTopicError
    │   ├── TopicExistsError
    │   ├── TopicCollisionError      the name differs from an existing topic's only by '.' versus '_'
    │   └── InternalTopicError       an internal topic (``__consumer_offsets``) cannot be deleted
    ├── GroupError
    │   ├── GroupNotFoundError       no /consumers/<group> in ZooKeeper
    │   └── GroupActiveError         an ops change refused while the group has live members
    ├── ConsumerTimeoutError         no message within consumer.timeout.ms (retriable)
    ├── ConsumerRebalanceFailedError every attempt of a rebalance failed (retriable)
    │   └── ConsumerRebalanceRefusedError  an attempt met a fatal error (a refused login): also an
    │                                      AuthenticationError, not retriable
    ├── CoordinatorError             the group coordinator moved, is loading or unavailable (retriable)
    ├── KafkaOffsetsUnavailable      the coordinator could not be reached within the deadline
    ├── DataLossError                offsets a read needs are no longer in the log
    └── BrokerResponseError          an error code answered by a broker (see ``for_code``); the SASL codes'
                                     classes are AuthenticationErrors too

Kafka error codes are registered once, in :class:`ErrorCode`; the broker answers ``ErrorCode.<NAME>`` and clients
branch on the properties of ``for_code(code)`` (``retriable``, ``invalid_metadata``, ``group_coordinator``).

This module is a table, and stays one module over 500 lines on purpose: the tree above, the Kafka error codes and
one registered class per code, each a few lines, read together.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum
from typing import ClassVar


class MetaqError(Exception):
    """Root of every metaq error."""

    retriable: ClassVar[bool] = False


class ConfigError(MetaqError, ValueError):
    """An unknown option, or an option whose value is invalid. The message names the option."""


class ZooKeeperError(MetaqError):
    """ZooKeeper refused or failed an operation."""


class ZooKeeperUnavailableError(ZooKeeperError):
    """No ZooKeeper connection could be made within the connection timeout."""

    retriable = True


class ZooKeeperAuthError(ZooKeeperError):
    """ZooKeeper refused an operation on a node because of the node's ACL (NoAuth), or refused the session's
    credentials (AuthFailed). Not retriable: the identity (``zookeeper.auth``) must change. ``path`` is the
    node's full path, when there is one."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class ZooKeeperServerError(ZooKeeperError):
    """The embedded ZooKeeper server could not be found, started or stopped."""


class StaleVersionError(ZooKeeperError):
    """A conditional write lost a race: the node's version is no longer the one read."""


class ControllerMovedError(StaleVersionError):
    """A controller's fenced write failed: ``/controller_epoch`` moved on, another broker controls now."""


class MalformedNodeError(ZooKeeperError):
    """A ZooKeeper node whose data does not have the expected format."""

    def __init__(self, path: str, data: bytes | str | None, reason: str) -> None:
        shown = data if isinstance(data, str) else (data or b"").decode("utf-8", "replace")
        if len(shown) > 200:
            shown = shown[:200] + "..."
        super().__init__(f"malformed node {path}: {reason}; content: {shown!r}")
        self.path = path
        self.data = data
        self.reason = reason


class ProtocolError(MetaqError):
    """A wire frame that cannot be decoded, is too large, or names an unsupported API."""


class CorruptRecordError(MetaqError):
    """A record batch whose size, magic byte or CRC is invalid."""


class UnsupportedMessageFormatError(CorruptRecordError):
    """A message set in a format other than record batch v2 (magic 0 or 1)."""


class UnsupportedCompressionError(CorruptRecordError):
    """A batch compressed with a codec id that is unknown (every known codec is installed: cramjam)."""


class InvalidRecordError(CorruptRecordError):
    """A batch whose CRC is valid but whose contents are not: records that do not decode, a record count or
    offset deltas that do not match, flags a client may not set (Kafka's ``InvalidRecordException``)."""


class BrokerConnectionError(MetaqError):
    """A broker could not be reached, or the connection broke mid-request."""

    retriable = True


class AuthenticationError(MetaqError):
    """The broker refused this client's credentials, or the client refused the broker's certificate. Fatal:
    the same settings fail the same way, so callers stop (and report it) instead of reconnecting."""


class TlsHandshakeError(AuthenticationError):
    """The TLS handshake with a broker failed for a reason retrying cannot fix (an untrusted or mismatched
    certificate, a refused client certificate, no common protocol); the message names host:port."""


class StorageError(MetaqError):
    """The log on disk cannot be read or written."""


class DeserializationError(MetaqError):
    """A record's key or value could not be decoded by the configured deserializer."""


class TopicError(MetaqError):
    """A problem with a topic as a whole."""


class UnknownTopicError(TopicError):
    """The topic does not exist (in ZooKeeper)."""


class TopicExistsError(TopicError):
    """The topic already exists."""


class TopicCollisionError(TopicError):
    """A new topic's name equals an existing one's once '.' is read as '_' (their metric names would clash):
    refused as Kafka's ``AdminZkClient.validateTopicCreate`` refuses it."""


class InternalTopicError(TopicError):
    """An internal topic (``__consumer_offsets``, ``__transaction_state``) was named where only user topics may
    be: deleting it would erase every group's committed offsets."""


class GroupError(MetaqError):
    """A problem with a consumer group as a whole."""


class GroupNotFoundError(GroupError):
    """The group has no node in ZooKeeper (never existed, or was deleted)."""


class GroupActiveError(GroupError):
    """An offset change was refused because the group has live members, which would overwrite it."""


class ConsumerTimeoutError(MetaqError):
    """No message arrived within consumer.timeout.ms (the stream can be iterated again)."""

    retriable = True


class ConsumerRebalanceFailedError(MetaqError):
    """Every attempt of a rebalance failed; the member keeps retrying on the next event or backoff."""

    retriable = True


class ConsumerRebalanceRefusedError(ConsumerRebalanceFailedError, AuthenticationError):
    """A rebalance attempt met an AuthenticationError (the offsets channel's login was refused): the
    rebalance stopped at that attempt, since every retry would be refused the same way."""

    retriable = False


class CoordinatorError(MetaqError):
    """The coordinator moved, is loading or is unavailable: drop the channel and look it up again."""

    retriable = True

    def __init__(self, code: int, context: str) -> None:
        super().__init__(f"{for_code(code).message} ({code}) {context}")
        self.code = code


class KafkaOffsetsUnavailable(MetaqError):
    """The group's coordinator could not be reached (or would not answer) within the deadline."""


class DataLossError(MetaqError):
    """Offsets a read needs are no longer in the log (retention deleted them, or the log was truncated).

    Raised only with ``failOnDataLoss=true``; otherwise the gap is skipped with a warning."""


class ErrorCode(IntEnum):
    """Every Kafka error code metaq answers or handles, by Kafka's name. Each one except NONE has a
    :class:`BrokerResponseError` subclass below that says whether retrying can help (a unit test checks it)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31


    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    PRODUCER_FENCED = 90
    UNKNOWN_TOPIC_ID = 100
    INCONSISTENT_TOPIC_ID = 103
    TRANSACTIONAL_ID_NOT_FOUND = 105
    UNSUPPORTED_ENDPOINT_TYPE = 119


class BrokerResponseError(MetaqError):
    """A Kafka error code answered by a broker. Subclasses exist per code; see :func:`for_code`.

    ``invalid_metadata``: the client's idea of the leader is stale (look it up again); ``group_coordinator``:
    the group's coordinator moved, is loading or is unavailable (look the coordinator up again)."""

    code: ClassVar[int] = -1
    message: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    invalid_metadata: ClassVar[bool] = False
    group_coordinator: ClassVar[bool] = False
    authorization: ClassVar[bool] = False
    """An ACL refused the request: fatal for the resource until an operator changes the ACLs."""


_BY_CODE: dict[int, type[BrokerResponseError]] = {}


def _broker_error(code: ErrorCode, *, retriable: bool = False, invalid_metadata: bool = False,
                  group_coordinator: bool = False, authorization: bool = False,
                  ) -> Callable[[type[BrokerResponseError]], type[BrokerResponseError]]:
    def register(cls: type[BrokerResponseError]) -> type[BrokerResponseError]:
        cls.code = code
        cls.message = code.name
        cls.retriable = retriable
        cls.invalid_metadata = invalid_metadata
        cls.group_coordinator = group_coordinator
        cls.authorization = authorization
        _BY_CODE[code] = cls
        return cls

    return register


@_broker_error(ErrorCode.OFFSET_OUT_OF_RANGE)
class OffsetOutOfRangeError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.CORRUPT_MESSAGE, retriable=True)
class CorruptMessageError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, retriable=True, invalid_metadata=True)
class UnknownTopicOrPartitionError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.LEADER_NOT_AVAILABLE, retriable=True, invalid_metadata=True)
class LeaderNotAvailableError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.NOT_LEADER_OR_FOLLOWER, retriable=True, invalid_metadata=True)
class NotLeaderForPartitionError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.REQUEST_TIMED_OUT, retriable=True)
class RequestTimedOutError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.NOT_ENOUGH_REPLICAS, retriable=True)
class NotEnoughReplicasError(BrokerResponseError):
    """Fewer in-sync replicas than min.insync.replicas: an acks=all produce was refused before the append."""


@_broker_error(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, retriable=True)
class NotEnoughReplicasAfterAppendError(BrokerResponseError):
    """The ISR shrank below min.insync.replicas after an acks=all batch was appended (not acknowledged)."""


@_broker_error(ErrorCode.FENCED_LEADER_EPOCH, retriable=True, invalid_metadata=True)
class FencedLeaderEpochError(BrokerResponseError):
    """The request's leader epoch is older than the broker's: the client's metadata is stale."""


@_broker_error(ErrorCode.UNKNOWN_LEADER_EPOCH, retriable=True)
class UnknownLeaderEpochError(BrokerResponseError):
    """The request's leader epoch is newer than the broker's: the broker has not caught up yet."""


@_broker_error(ErrorCode.OFFSET_NOT_AVAILABLE, retriable=True)
class OffsetNotAvailableError(BrokerResponseError):
    """A new leader has not yet confirmed the records its predecessor may have exposed (its high watermark is
    below the start offset of its leader epoch): ListOffsets for the latest offset would go backwards."""


@_broker_error(ErrorCode.MESSAGE_TOO_LARGE)
class MessageSizeTooLargeError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.OFFSET_METADATA_TOO_LARGE)
class OffsetMetadataTooLargeError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, retriable=True, group_coordinator=True)
class CoordinatorLoadInProgressError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, retriable=True, group_coordinator=True)
class CoordinatorNotAvailableError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.NOT_COORDINATOR, retriable=True, group_coordinator=True)
class NotCoordinatorError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.INVALID_TOPIC_EXCEPTION)
class InvalidTopicError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.RECORD_LIST_TOO_LARGE)
class RecordListTooLargeError(MessageSizeTooLargeError):
    """A produce whose records exceed the log's segment size (Kafka's RecordBatchTooLargeException): a size
    error like MESSAGE_TOO_LARGE, with Kafka's own code."""


@_broker_error(ErrorCode.INVALID_REQUIRED_ACKS)
class InvalidRequiredAcksError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.ILLEGAL_GENERATION)
class IllegalGenerationError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
class InconsistentGroupProtocolError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.INVALID_GROUP_ID)
class InvalidGroupIdError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.UNKNOWN_MEMBER_ID)
class UnknownMemberIdError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.INVALID_SESSION_TIMEOUT)
class InvalidSessionTimeoutError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.REBALANCE_IN_PROGRESS)
class RebalanceInProgressError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.INVALID_COMMIT_OFFSET_SIZE)
class InvalidCommitOffsetSizeError(BrokerResponseError):
    """An OffsetCommit whose batch is larger than the offsets topic takes: a smaller one must be sent."""


@_broker_error(ErrorCode.TOPIC_AUTHORIZATION_FAILED, authorization=True)
class TopicAuthorizationFailedError(BrokerResponseError):
    """The principal may not do this to the topic (an ACL): fatal, retrying cannot help."""


@_broker_error(ErrorCode.GROUP_AUTHORIZATION_FAILED, authorization=True)
class GroupAuthorizationFailedError(BrokerResponseError):
    """The principal may not use the group (an ACL): fatal, retrying cannot help."""


@_broker_error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, authorization=True)
class ClusterAuthorizationFailedError(BrokerResponseError):
    """The principal may not do this cluster-wide operation (an ACL)."""


@_broker_error(ErrorCode.SECURITY_DISABLED)
class SecurityDisabledError(BrokerResponseError):
    """The broker has no authorizer (``authorizer.class.name`` unset): ACL APIs are refused."""


@_broker_error(ErrorCode.UNSUPPORTED_SASL_MECHANISM)
class UnsupportedSaslMechanismError(BrokerResponseError, AuthenticationError):
    pass


@_broker_error(ErrorCode.ILLEGAL_SASL_STATE)
class IllegalSaslStateError(BrokerResponseError, AuthenticationError):
    pass


@_broker_error(ErrorCode.UNSUPPORTED_VERSION)
class UnsupportedVersionError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.TOPIC_ALREADY_EXISTS)
class TopicAlreadyExistsResponseError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.INVALID_PARTITIONS)
class InvalidPartitionsError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.INVALID_REPLICATION_FACTOR)
class InvalidReplicationFactorError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.INVALID_REPLICA_ASSIGNMENT)
class InvalidReplicaAssignmentError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.INVALID_CONFIG)
class InvalidConfigError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.POLICY_VIOLATION)
class PolicyViolationError(BrokerResponseError):
    """A request over a configured bound (the message names it)."""


@_broker_error(ErrorCode.INVALID_REQUEST)
class InvalidRequestError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT)
class UnsupportedForMessageFormatError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
class OutOfOrderSequenceError(BrokerResponseError):
    """An idempotent producer's batch does not follow its previous one on the partition (a gap, or a new
    epoch not starting at sequence 0): fatal for the producer, as Kafka's OutOfOrderSequenceException."""


@_broker_error(ErrorCode.DUPLICATE_SEQUENCE_NUMBER)
class DuplicateSequenceError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.INVALID_PRODUCER_EPOCH)
class InvalidProducerEpochError(BrokerResponseError):
    """A batch carries an epoch older than the one the partition has seen for its producer id."""


@_broker_error(ErrorCode.INVALID_TXN_STATE)
class InvalidTxnStateError(BrokerResponseError):
    """A transactional request that the transaction's state does not allow (docs/transactions.md)."""


@_broker_error(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
class InvalidProducerIdMappingError(BrokerResponseError):
    """The producer id is not the one the coordinator holds for the transactional id."""


@_broker_error(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
class InvalidTransactionTimeoutError(BrokerResponseError):
    """transaction.timeout.ms above the broker's transaction.max.timeout.ms (or not positive)."""


@_broker_error(ErrorCode.CONCURRENT_TRANSACTIONS, retriable=True)
class ConcurrentTransactionsError(BrokerResponseError):
    """The previous transaction of this transactional id is still being completed: retry."""


@_broker_error(ErrorCode.TRANSACTION_COORDINATOR_FENCED)
class TransactionCoordinatorFencedError(BrokerResponseError):
    """A transaction marker from a coordinator older than the one the partition has seen."""


@_broker_error(ErrorCode.OPERATION_NOT_ATTEMPTED)
class OperationNotAttemptedError(BrokerResponseError):
    """Another part of the request failed, so this one was not tried."""


@_broker_error(ErrorCode.PRODUCER_FENCED)
class ProducerFencedError(BrokerResponseError):
    """A newer producer with the same transactional id bumped the epoch: this one is a zombie."""


@_broker_error(ErrorCode.UNKNOWN_PRODUCER_ID)
class UnknownProducerIdError(OutOfOrderSequenceError):
    """Kafka 2.x's answer to an unknown producer continuing past sequence 0; a 3.x broker accepts it."""


@_broker_error(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
class TransactionalIdAuthorizationFailedError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.KAFKA_STORAGE_ERROR, retriable=True, invalid_metadata=True)
class KafkaStorageError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.LOG_DIR_NOT_FOUND)
class LogDirNotFoundError(BrokerResponseError):
    """AlterReplicaLogDirs named a path that is not one of the broker's log.dirs."""


@_broker_error(ErrorCode.REPLICA_NOT_AVAILABLE, retriable=True, invalid_metadata=True)
class ReplicaNotAvailableError(BrokerResponseError):
    """The broker holds no replica of the partition (yet)."""


@_broker_error(ErrorCode.NOT_CONTROLLER, retriable=True)
class NotControllerError(BrokerResponseError):
    """The request must go to the controller (ElectLeaders, partition reassignments in ZooKeeper mode)."""


@_broker_error(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, retriable=True, invalid_metadata=True)
class PreferredLeaderNotAvailableError(BrokerResponseError):
    """A preferred election found the first replica dead or out of the ISR (80, 83 and 84 are invalid-metadata
    errors, as Kafka's exception classes for them are)."""


@_broker_error(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, retriable=True, invalid_metadata=True)
class EligibleLeadersNotAvailableError(BrokerResponseError):
    """An unclean election found no live replica to lead."""


@_broker_error(ErrorCode.ELECTION_NOT_NEEDED, retriable=True, invalid_metadata=True)
class ElectionNotNeededError(BrokerResponseError):
    """The partition already has the leader the election would choose."""


@_broker_error(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
class NoReassignmentInProgressError(BrokerResponseError):
    """A cancellation named a partition that is not being moved."""


@_broker_error(ErrorCode.SASL_AUTHENTICATION_FAILED)
class SaslAuthenticationFailedError(BrokerResponseError, AuthenticationError):
    pass


@_broker_error(ErrorCode.NON_EMPTY_GROUP)
class NonEmptyGroupError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.GROUP_ID_NOT_FOUND)
class GroupIdNotFoundError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
class UnsupportedCompressionTypeError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.MEMBER_ID_REQUIRED)
class MemberIdRequiredError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.GROUP_MAX_SIZE_REACHED)
class GroupMaxSizeReachedError(BrokerResponseError):
    """The group is as large as the broker allows (here: its members' JoinGroup metadata)."""


@_broker_error(ErrorCode.FENCED_INSTANCE_ID)
class FencedInstanceIdError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
class GroupSubscribedToTopicError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.UNKNOWN_TOPIC_ID, retriable=True, invalid_metadata=True)
class UnknownTopicIdError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.INCONSISTENT_TOPIC_ID, retriable=True, invalid_metadata=True)
class InconsistentTopicIdError(BrokerResponseError):
    """The broker's log of the partition belongs to an earlier topic of the same name (Kafka's
    InconsistentTopicIdException is an InvalidMetadataException)."""


@_broker_error(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
class TransactionalIdNotFoundError(BrokerResponseError):
    """DescribeTransactions of a transactional id its coordinator does not know."""


@_broker_error(ErrorCode.UNSUPPORTED_ENDPOINT_TYPE)
class UnsupportedEndpointTypeError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.INVALID_RECORD)
class InvalidRecordResponseError(BrokerResponseError):
    pass


@_broker_error(ErrorCode.UNSTABLE_OFFSET_COMMIT, retriable=True)
class UnstableOffsetCommitError(BrokerResponseError):
    """OffsetFetch with require_stable while a transaction holds offsets of the partition (KIP-447)."""


@_broker_error(ErrorCode.UNKNOWN_SERVER_ERROR)
class UnknownServerError(BrokerResponseError):
    pass


def for_code(code: int) -> type[BrokerResponseError]:
    """The error class for a Kafka error code; unknown codes get a new subclass that keeps the code."""
    cls = _BY_CODE.get(code)
    if cls is None:
        cls = type(f"BrokerError{code}", (UnknownServerError,), {"code": code, "message": f"ERROR_{code}"})
    return cls


def raise_for_code(code: int, context: str) -> None:
    """Raise the error for a non-zero Kafka error code, with ``context`` (topic-partition, request) in the text."""
    if code:
        cls = for_code(code)
        raise cls(f"{cls.message} ({code}) for {context}")
