"""The one exception hierarchy of metaq.

Every error metaq raises derives from :class:`MetaqError`; third-party errors are translated at the
boundary (``raise ... from e``). Whether retrying can help is a property of the class (``retriable``)::

    MetaqError
    ├── ConfigError                  bad option name or value (fatal)
    ├── ZooKeeperError               ZooKeeper unreachable or refused an operation
    │   ├── ZooKeeperUnavailableError   no connection within the timeout (retriable)
    │   ├── ZooKeeperServerError        the embedded server cannot be found or started
    │   ├── StaleVersionError           a conditional write lost a race (the node changed)
    │   └── MalformedNodeError          a node's data does not parse (names the path)
    ├── ProtocolError                a frame that cannot be decoded or is not allowed (names the frame)
    ├── CorruptRecordError           a record batch failed its size, magic or CRC check
    │   ├── UnsupportedMessageFormatError  magic 0/1 message sets
    │   ├── UnsupportedCompressionError    a codec id that is unknown or whose library is not installed
    │   └── InvalidRecordError             a batch with a valid CRC whose records or flags are invalid
    ├── BrokerConnectionError        a broker unreachable or the connection broke (retriable)
    ├── StorageError                 the log on disk cannot be read or written
    ├── DeserializationError         a record's key or value does not decode (names topic/partition/offset)
    ├── TopicError
    │   ├── UnknownTopicError
    │   └── TopicExistsError
    ├── GroupError
    │   ├── GroupNotFoundError       no /consumers/<group> in ZooKeeper
    │   └── GroupActiveError         an ops change refused while the group has live members
    └── BrokerResponseError          an error code answered by a broker (see ``for_code``)
"""

from __future__ import annotations

from collections.abc import Callable
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


class ZooKeeperServerError(ZooKeeperError):
    """The embedded ZooKeeper server could not be found, started or stopped."""


class StaleVersionError(ZooKeeperError):
    """A conditional write lost a race: the node's version is no longer the one read."""


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
    """A batch compressed with a codec id that is unknown, or whose library is not installed here."""


class InvalidRecordError(CorruptRecordError):
    """A batch whose CRC is valid but whose contents are not: records that do not decode, a record count or
    offset deltas that do not match, flags a client may not set (Kafka's ``InvalidRecordException``)."""


class BrokerConnectionError(MetaqError):
    """A broker could not be reached, or the connection broke mid-request."""

    retriable = True


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


class GroupError(MetaqError):
    """A problem with a consumer group as a whole."""


class GroupNotFoundError(GroupError):
    """The group has no node in ZooKeeper (never existed, or was deleted)."""


class GroupActiveError(GroupError):
    """An offset change was refused because the group has live members, which would overwrite it."""


class BrokerResponseError(MetaqError):
    """A Kafka error code answered by a broker. Subclasses exist per code; see :func:`for_code`."""

    code: ClassVar[int] = -1
    message: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    invalid_metadata: ClassVar[bool] = False


_BY_CODE: dict[int, type[BrokerResponseError]] = {}


def _broker_error(code: int, message: str, *, retriable: bool = False, invalid_metadata: bool = False,
                  ) -> Callable[[type[BrokerResponseError]], type[BrokerResponseError]]:
    def register(cls: type[BrokerResponseError]) -> type[BrokerResponseError]:
        cls.code = code
        cls.message = message
        cls.retriable = retriable
        cls.invalid_metadata = invalid_metadata
        _BY_CODE[code] = cls
        return cls

    return register


@_broker_error(1, "OFFSET_OUT_OF_RANGE")
class OffsetOutOfRangeError(BrokerResponseError):
    pass


@_broker_error(2, "CORRUPT_MESSAGE", retriable=True)
class CorruptMessageError(BrokerResponseError):
    pass


@_broker_error(3, "UNKNOWN_TOPIC_OR_PARTITION", retriable=True, invalid_metadata=True)
class UnknownTopicOrPartitionError(BrokerResponseError):
    pass


@_broker_error(6, "NOT_LEADER_OR_FOLLOWER", retriable=True, invalid_metadata=True)
class NotLeaderForPartitionError(BrokerResponseError):
    pass


@_broker_error(7, "REQUEST_TIMED_OUT", retriable=True)
class RequestTimedOutError(BrokerResponseError):
    pass


@_broker_error(10, "MESSAGE_TOO_LARGE")
class MessageSizeTooLargeError(BrokerResponseError):
    pass


@_broker_error(17, "INVALID_TOPIC_EXCEPTION")
class InvalidTopicError(BrokerResponseError):
    pass


@_broker_error(35, "UNSUPPORTED_VERSION")
class UnsupportedVersionError(BrokerResponseError):
    pass


@_broker_error(43, "UNSUPPORTED_FOR_MESSAGE_FORMAT")
class UnsupportedForMessageFormatError(BrokerResponseError):
    pass


@_broker_error(56, "KAFKA_STORAGE_ERROR", retriable=True, invalid_metadata=True)
class KafkaStorageError(BrokerResponseError):
    pass


@_broker_error(76, "UNSUPPORTED_COMPRESSION_TYPE")
class UnsupportedCompressionTypeError(BrokerResponseError):
    pass


@_broker_error(87, "INVALID_RECORD")
class InvalidRecordResponseError(BrokerResponseError):
    pass


@_broker_error(-1, "UNKNOWN_SERVER_ERROR")
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
