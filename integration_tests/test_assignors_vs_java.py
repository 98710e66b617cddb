"""metaq's assignors against kafka-clients 3.9's own classes: one JVM run (integration_tests/java/AssignorCases.java)
computes RangeAssignor, RoundRobinAssignor and CooperativeStickyAssignor results for the cases below, and metaq's
leader code (metaq.consumer.cooperative.assign, over subscriptions round-tripped through its
ConsumerProtocolSubscription v3 codec) must give the same assignment for every member."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from metaq.consumer.cooperative import assign, decode_subscription, encode_subscription, sticky_user_data
from metaq.testing.java_peers import CLIENTS_3_9, JAVA_PROGRAMS, run_program


@dataclass(frozen=True)
class _Member:
    member_id: str
    topics: tuple[str, ...]
    generation: int = -1
    owned: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class _Case:
    name: str
    assignor: str
    topics: dict[str, int]
    members: tuple[_Member, ...]


def _own(topic: str, *partitions: int) -> tuple[tuple[str, int], ...]:
    return tuple((topic, p) for p in partitions)


MEMBER_IDS = ("consumer-g-1-4f1c2a", "rdkafka-9d0e", "consumer-g-2-77ab10", "metaq-x-3", "rdkafka-0001")
A, B, C, D, E = MEMBER_IDS
CASES = (
    _Case("range-even", "range", {"t0": 3, "t1": 5}, tuple(_Member(m, ("t0", "t1")) for m in (A, B, C))),
    _Case("range-mixed", "range", {"t0": 4, "t1": 3},
          (_Member(A, ("t0",)), _Member(B, ("t0", "t1")), _Member(C, ("t1",)))),
    _Case("roundrobin-mixed", "roundrobin", {"t0": 4, "t1": 5},
          (_Member(A, ("t0", "t1")), _Member(B, ("t1",)), _Member(C, ("t0", "t1")))),
    _Case("sticky-fresh", "cooperative-sticky", {"t0": 4, "t1": 3},
          tuple(_Member(m, ("t0", "t1")) for m in (A, B, C))),
    _Case("sticky-join", "cooperative-sticky", {"t": 12},
          (_Member(A, ("t",), 3, _own("t", *range(6))), _Member(B, ("t",), 3, _own("t", *range(6, 12))),
           _Member(C, ("t",)))),
    _Case("sticky-leave", "cooperative-sticky", {"t": 13},
          (_Member(A, ("t",), 5, _own("t", 0, 1, 2, 3)), _Member(B, ("t",), 5, _own("t", 4, 5, 6)),
           _Member(D, ("t",), 5, _own("t", 10, 11, 12)))),
    # three members over quota, only two may keep the extra partition: Java's HashMap order decides
    _Case("sticky-over-quota", "cooperative-sticky", {"t": 12},
          (_Member(A, ("t",), 7, _own("t", 0, 1, 2, 3)), _Member(B, ("t",), 7, _own("t", 4, 5, 6, 7)),
           _Member(C, ("t",), 7, _own("t", 8, 9, 10, 11)), _Member(D, ("t",)), _Member(E, ("t",)))),
    _Case("sticky-two-topics", "cooperative-sticky", {"a": 5, "b": 4},
          (_Member(A, ("a", "b"), 2, _own("a", 0, 1, 2) + _own("b", 0, 1)),
           _Member(B, ("a", "b"), 2, _own("a", 3, 4) + _own("b", 2, 3)), _Member(C, ("a", "b")),
           _Member(D, ("a", "b")))),
    _Case("sticky-stale-claim", "cooperative-sticky", {"t": 6},
          (_Member(A, ("t",), 9, _own("t", 0, 1, 2)), _Member(B, ("t",), 8, _own("t", 2, 3, 4, 5)),
           _Member(C, ("t",), 9, _own("t", 3)))),
)


def _input(cases: tuple[_Case, ...]) -> str:
    lines = []
    for case in cases:
        lines.append(f"case {case.name} {case.assignor}")
        lines.extend(f"topic {t} {n}" for t, n in case.topics.items())
        for m in case.members:
            owned = ",".join(f"{t}:{p}" for t, p in m.owned) or "-"
            lines.append(f"member {m.member_id} {m.generation} {','.join(m.topics)} {owned}")
        lines.append("end")
    return "\n".join(lines) + "\n"


def _metaq(case: _Case) -> dict[str, set[str]]:
    subscriptions = {m.member_id: decode_subscription(encode_subscription(
        m.topics, owned=m.owned, generation=m.generation, user_data=sticky_user_data(m.generation)))
        for m in case.members}
    result = assign(case.assignor, subscriptions, case.topics, {m.member_id: None for m in case.members})
    return {member: {f"{t}-{p}" for t, p in parts} for member, parts in result.items()}


@pytest.mark.compat("group assignors equal Java's (range, roundrobin, cooperative-sticky)", "Java kafka-clients 3.9.1")
def test_assignments_equal_kafka_clients() -> None:
    run = run_program(CLIENTS_3_9, JAVA_PROGRAMS / "AssignorCases.java", [], stdin=_input(CASES)).check()
    java = {line["case"]: {m: set(parts) for m, parts in line["assignment"].items()} for line in run.json_lines()}
    assert sorted(java) == sorted(c.name for c in CASES)
    differing = {case.name: (java[case.name], _metaq(case)) for case in CASES if java[case.name] != _metaq(case)}
    assert differing == {}
    # the join case is incremental: the new member gets nothing until the owners revoked (KIP-429)
    assert java["sticky-join"][C] == set()
