"""``__consumer_offsets`` record formats (Kafka's OffsetCommitKey/OffsetCommitValue) and partitionFor.

Keys: int16 version (0/1 = offset commit: group, topic, partition; 2 = group metadata: group).
Values: int16 version; v0/v2: offset, metadata, commit timestamp; v1: + expire timestamp; v3: offset,
leader epoch, metadata, commit timestamp. A null value is a tombstone. Strings are int16 length + UTF-8.
Group metadata values (Kafka's GroupMetadataValue v0..v3): protocol type, generation, protocol, leader,
(v2+) state timestamp, members (id, (v3) instance id, client id, host, (v1+) rebalance timeout, session
timeout, subscription, assignment); metaq writes v3.
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


@dataclass(frozen=True, slots=True)
class StoredMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    """A group's membership as of its last completed rebalance: a coordinator that takes the group over
    (leadership of the offsets partition moved) knows its members, so they keep their assignment."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    members: tuple[StoredMember, ...]
    state_timestamp: int = -1


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


def _nullable_string(value: str | None) -> bytes:
    return _I16.pack(-1) if value is None else _string(value)


def _bytes(value: bytes) -> bytes:
    return _I32.pack(len(value)) + value


def encode_group_key(group: str) -> bytes:
    return _I16.pack(2) + _string(group)


def encode_group_value(value: GroupValue) -> bytes:
    out = [_I16.pack(3), _string(value.protocol_type), _I32.pack(value.generation),
           _nullable_string(value.protocol), _nullable_string(value.leader), _I64.pack(value.state_timestamp),
           _I32.pack(len(value.members))]
    for m in value.members:
        out += [_string(m.member_id), _nullable_string(m.group_instance_id), _string(m.client_id),
                _string(m.client_host), _I32.pack(m.rebalance_timeout_ms), _I32.pack(m.session_timeout_ms),
                _bytes(m.subscription), _bytes(m.assignment)]
    return b"".join(out)


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

    def nullable_string(self) -> str | None:
        if self.pos + 2 <= len(self.data) and _I16.unpack_from(self.data, self.pos)[0] == -1:
            self.pos += 2
            return None
        return self.string()

    def bytes_(self) -> bytes:
        n = self.take(_I32)
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptRecordError(f"{self.what}: bad bytes length {n} at byte {self.pos - 4}")
        self.pos += n
        return self.data[self.pos - n:self.pos]

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


def decode_group_value(data: bytes) -> GroupValue:
    r = _Reader(data, f"{OFFSETS_TOPIC} group value")
    version = r.take(_I16)
    if not 0 <= version <= 3:
        raise CorruptRecordError(f"{OFFSETS_TOPIC} group value: unknown version {version}")
    protocol_type, generation = r.string(), r.take(_I32)
    protocol, leader = r.nullable_string(), r.nullable_string()
    timestamp = r.take(_I64) if version >= 2 else -1
    members = []
    for _ in range(r.take(_I32)):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id, host = r.string(), r.string()
        rebalance_timeout = r.take(_I32) if version >= 1 else -1
        session_timeout = r.take(_I32)
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout
        members.append(StoredMember(member_id, instance_id, client_id, host, rebalance_timeout, session_timeout,
                                    r.bytes_(), r.bytes_()))
    return GroupValue(protocol_type, generation, protocol, leader, tuple(members), timestamp)
