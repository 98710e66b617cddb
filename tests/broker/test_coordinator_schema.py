"""__consumer_offsets formats byte-exact against Kafka's OffsetCommitKey/Value schemas (docs/wire-protocol.md §3)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from metaq.broker.coordinator.offsets_schema import (
    GroupKey,
    GroupValue,
    OffsetKey,
    OffsetValue,
    StoredMember,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    partition_for,
)
from metaq.errors import CorruptRecordError


def test_byte_exact_examples() -> None:
    assert encode_offset_key(OffsetKey("g1", "t1", 0)).hex() == "0001" "0002" "6731" "0002" "7431" "00000000"
    v1 = encode_offset_value(OffsetValue(42, "", 1700000000000, expire_timestamp=-1 + 0))
    assert v1.hex() == "0003" "000000000000002a" "ffffffff" "0000" "0000018bcfe56800"
    v1_exp = OffsetValue(42, "", 1700000000000, expire_timestamp=1700000000000)
    assert encode_offset_value(v1_exp).hex().startswith("0001" "000000000000002a" "0000" "0000018bcfe56800")
    raw_v1 = bytes.fromhex("0001000000000000002a00000000018bcfe56800ffffffffffffffff")
    assert decode_offset_value(raw_v1) == OffsetValue(42, "", 1700000000000, -1)


def test_partition_for_matches_kafka() -> None:
    assert partition_for("g1", 50) == 42
    assert partition_for("my-group", 50) == 12
    assert partition_for("polygenelubricants", 50) == 0  # hashCode == Integer.MIN_VALUE


@given(st.text(max_size=30), st.text(max_size=30), st.integers(0, 2**31 - 1))
def test_key_round_trip(group: str, topic: str, partition: int) -> None:
    key = OffsetKey(group, topic, partition)
    assert decode_key(encode_offset_key(key)) == key


@given(st.integers(0, 2**62), st.text(max_size=50), st.integers(0, 2**50), st.integers(-1, 2**50))
def test_value_round_trip(offset: int, metadata: str, ts: int, expire: int) -> None:
    value = OffsetValue(offset, metadata, ts, expire)
    assert decode_offset_value(encode_offset_value(value)) == value


def test_group_key_and_garbage() -> None:
    assert decode_key(b"\x00\x02\x00\x01g") == GroupKey("g")
    for bad in (b"", b"\x00", b"\x00\x09", b"\x00\x01\x00\x05ab", b"\x00\x01\xff\xff"):
        with pytest.raises(CorruptRecordError):
            decode_key(bad)
    with pytest.raises(CorruptRecordError):
        decode_offset_value(b"\x00\x07" + b"\x00" * 20)


@given(st.binary(max_size=64))
def test_arbitrary_bytes_only_raise_corrupt_record(data: bytes) -> None:
    for fn in (decode_key, decode_offset_value):
        try:
            fn(data)
        except CorruptRecordError:
            pass


def test_group_metadata_round_trip_and_kafka_v0() -> None:
    """Kafka's GroupMetadataKey (version 2) and GroupMetadataValue: metaq writes v3 and reads v0..v3."""
    assert decode_key(encode_group_key("g1")) == GroupKey("g1")
    assert encode_group_key("g1").hex() == "0002" "0002" "6731"
    members = (StoredMember("m-1", None, "c", "/h", 300, 100, b"sub", b"asg"),
               StoredMember("m-2", "static", "c", "/h", 300, 100, b"", b""))
    value = GroupValue("consumer", 7, "range", "m-1", members, 1_700_000_000_000)
    assert decode_group_value(encode_group_value(value)) == value
    empty = GroupValue("consumer", 8, None, None, ())
    assert decode_group_value(encode_group_value(empty)) == empty
    v0 = bytes.fromhex("0000" "0008" + b"consumer".hex() + "00000007" "0005" + b"range".hex() + "0003"
                       + b"m-1".hex() + "00000001" "0003" + b"m-1".hex() + "0001" + b"c".hex() + "0002"
                       + b"/h".hex() + "00000064" "00000003" + b"sub".hex() + "00000003" + b"asg".hex())
    assert decode_group_value(v0) == GroupValue("consumer", 7, "range", "m-1", (
        StoredMember("m-1", None, "c", "/h", 100, 100, b"sub", b"asg"),))
    with pytest.raises(CorruptRecordError, match="group value"):
        decode_group_value(encode_group_value(value)[:-2])
