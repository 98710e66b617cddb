"""``__consumer_offsets`` record formats (Kafka's OffsetCommitKey/OffsetCommitValue) and partitionFor.

Keys: int16 version (0/1 = offset commit: group, topic, partition; 2 = group metadata: group).
Values: int16 version; v0/v2: offset, metadata, commit timestamp; v1: + expire timestamp; v3: offset,
leader epoch, metadata, commit timestamp. A null value is a tombstone. Strings are int16 length + UTF-8.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from metaq.errors import CorruptRecordError
from metaq.hashing import java_string_hash

OFFSETS_TOPIC = "__consumer_offsets"
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1
    leader_epoch: int = -1


def partition_for(group: str, partitions: int) -> int:
    """Kafka's ``abs(group.hashCode) % partitions`` (Utils.abs maps Integer.MIN_VALUE to 0)."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def _string(value: str) -> bytes:
    data = value.encode("utf-8")
    return _I16.pack(len(data)) + data


def encode_offset_key(key: OffsetKey) -> bytes:
    return _I16.pack(1) + _string(key.group) + _string(key.topic) + _I32.pack(key.partition)


def encode_offset_value(value: OffsetValue) -> bytes:
    """v1 when an expire timestamp is set (as Kafka 2.8 does), else v3."""
    if value.expire_timestamp >= 0:
        return (_I16.pack(1) + _I64.pack(value.offset) + _string(value.metadata)
                + _I64.pack(value.commit_timestamp) + _I64.pack(value.expire_timestamp))
    return (_I16.pack(3) + _I64.pack(value.offset) + _I32.pack(value.leader_epoch) + _string(value.metadata)
            + _I64.pack(value.commit_timestamp))


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.pos = 0
        self.what = what

    def take(self, fmt: struct.Struct) -> int:
        if self.pos + fmt.size > len(self.data):
            raise CorruptRecordError(f"{self.what}: truncated at byte {self.pos}")
        (value,) = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return int(value)

    def string(self) -> str:
        n = self.take(_I16)
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptRecordError(f"{self.what}: bad string length {n} at byte {self.pos - 2}")
        raw = self.data[self.pos:self.pos + n]
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CorruptRecordError(f"{self.what}: invalid UTF-8 at byte {self.pos - n}") from e


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    r = _Reader(data, f"{OFFSETS_TOPIC} key")
    version = r.take(_I16)
    if version in (0, 1):
        return OffsetKey(r.string(), r.string(), r.take(_I32))
    if version == 2:
        return GroupKey(r.string())
    raise CorruptRecordError(f"{OFFSETS_TOPIC} key: unknown version {version}")


def decode_offset_value(data: bytes) -> OffsetValue:
    r = _Reader(data, f"{OFFSETS_TOPIC} value")
    version = r.take(_I16)
    if version in (0, 2):
        return OffsetValue(r.take(_I64), r.string(), r.take(_I64))
    if version == 1:
        return OffsetValue(r.take(_I64), r.string(), r.take(_I64), r.take(_I64))
    if version in (3, 4):  # 4 is the flexible form of 3; its trailing tagged fields are ignored
        offset = r.take(_I64)
        epoch = r.take(_I32)
        return OffsetValue(offset, r.string(), r.take(_I64), leader_epoch=epoch)
    raise CorruptRecordError(f"{OFFSETS_TOPIC} value: unknown version {version}")
