"""Consumer and thread ids in Kafka 0.8's format."""

from __future__ import annotations

import re
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from metaq.consumer.ids import consumer_id_of, make_consumer_id, make_thread_ids, split_thread_id
from metaq.errors import ConfigError

U = uuid.UUID("6b2a1f0c-1234-4abc-8def-0123456789ab")


def test_generated_consumer_id() -> None:
    cid = make_consumer_id("mygroup", hostname="host1", now_ms=1428512949385, uuid_=U)
    assert cid == "mygroup_host1-1428512949385-6b2a1f0c"


def test_hex_part_has_no_leading_zeros_like_java_to_hex_string() -> None:
    # Long.toHexString drops leading zeros before substring(0, 8)
    u = uuid.UUID("00000abc-def0-4123-8456-789abcdef012")
    assert make_consumer_id("g", hostname="h", now_ms=1, uuid_=u) == "g_h-1-abcdef04"


def test_defaults_use_host_time_and_random_uuid() -> None:
    cid = make_consumer_id("g")
    assert re.fullmatch(r"g_.+-[0-9]{13}-[0-9a-f]{1,8}", cid)


def test_configured_consumer_id() -> None:
    assert make_consumer_id("etl", "test-1") == "etl_test-1"
    assert make_consumer_id("etl", "test-1", hostname="ignored") == "etl_test-1"


@pytest.mark.parametrize("bad", ["", "a/b", "x\x00"])
def test_configured_consumer_id_must_be_a_node_name(bad: str) -> None:
    with pytest.raises(ConfigError, match="consumer.id"):
        make_consumer_id("g", bad)


def test_group_is_validated() -> None:
    with pytest.raises(ConfigError, match="group.id"):
        make_consumer_id("bad group", "x")


def test_thread_ids_in_stream_order() -> None:
    assert make_thread_ids("g_c", 3) == ["g_c-0", "g_c-1", "g_c-2"]
    assert make_thread_ids("g_c", 0) == []
    assert make_thread_ids("g_c", 11)[10] == "g_c-10"


@pytest.mark.parametrize("bad", [-1, True, 1.5])
def test_thread_ids_reject_bad_counts(bad: object) -> None:
    with pytest.raises(ValueError):
        make_thread_ids("g_c", bad)  # type: ignore[arg-type]


def test_consumer_id_of_strips_only_the_last_number() -> None:
    assert consumer_id_of("mygroup_host1-1428512949385-6b2a1f0c-0") == "mygroup_host1-1428512949385-6b2a1f0c"
    assert consumer_id_of("etl_test-1-12") == "etl_test-1"
    assert split_thread_id("g_c-10") == ("g_c", 10)


@pytest.mark.parametrize("bad", ["", "abc", "-0", "g_c-", "g_c-x", "g_c-1a", "g_c-\u0661"])
def test_consumer_id_of_rejects_non_thread_ids(bad: str) -> None:
    with pytest.raises(ValueError, match="thread id"):
        consumer_id_of(bad)


@given(
    group=st.from_regex(r"[a-zA-Z0-9_-][a-zA-Z0-9._-]{0,15}", fullmatch=True),
    host=st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1, max_size=20),
    ms=st.integers(0, 2**63 - 1),
    n=st.integers(1, 30),
    u=st.uuids(),
)
def test_round_trip(group: str, host: str, ms: int, n: int, u: uuid.UUID) -> None:
    cid = make_consumer_id(group, hostname=host, now_ms=ms, uuid_=u)
    assert cid.startswith(f"{group}_")
    for i, tid in enumerate(make_thread_ids(cid, n)):
        assert split_thread_id(tid) == (cid, i)
