"""metaq's assignors against kafka-clients 3.9's own classes: one JVM run (integration_tests/java/AssignorCases.java)
computes RangeAssignor, RoundRobinAssignor and CooperativeStickyAssignor results for the cases below, and metaq's
leader code (metaq.consumer.cooperative.assign, over subscriptions round-tripped through its
ConsumerProtocolSubscription v3 codec) must give the same assignment for every member. The ``general-`` cases
have members of different subscriptions (Java's GeneralAssignmentBuilder), some of them seeded random groups."""

from __future__ import annotations

import random
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


def _random_general_cases(n: int, seed: int = 4291) -> tuple[_Case, ...]:
    """Seeded groups of 3 to 6 members over up to 4 topics, each member subscribing to a random subset and owning
    a random share of a previous assignment (some from an older generation): where Java's order decides ties
    (the least loaded member, the partition that moves back), a difference shows."""
    rng = random.Random(seed)
    ids = [f"consumer-g-{i}-{rng.getrandbits(40):010x}" for i in range(6)] + ["rdkafka-77", "metaq-host-5"]
    cases = []
    for i in range(n):
        topics = {f"t{k}": rng.randint(1, 9) for k in range(rng.randint(2, 4))}
        members = rng.sample(ids, rng.randint(3, 6))
        subscribed = {m: tuple(sorted(rng.sample(sorted(topics), rng.randint(1, len(topics))))) for m in members}
        owned: dict[str, list[tuple[str, int]]] = {m: [] for m in members}
        for topic, count in topics.items():
            for p in range(count):
                holder = rng.choice([*members, None])
                if holder is not None:
                    owned[holder].append((topic, p))
        generations = {m: rng.choice([-1, 6, 7, 7]) for m in members}
        cases.append(_Case(f"general-random-{i}", "cooperative-sticky", topics,
                           tuple(_Member(m, subscribed[m], generations[m],
                                         tuple(owned[m]) if generations[m] >= 0 else ()) for m in members)))
    return tuple(cases)


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
    # different subscriptions: Java's GeneralAssignmentBuilder
    _Case("general-fresh", "cooperative-sticky", {"a": 4, "b": 3},
          (_Member(A, ("a", "b")), _Member(B, ("a",)), _Member(C, ("b",)))),
    _Case("general-no-overlap", "cooperative-sticky", {"a": 3, "b": 2, "c": 4},
          (_Member(A, ("a",)), _Member(B, ("a", "b")), _Member(C, ("c",)), _Member(D, ("a", "b")))),
    _Case("general-join", "cooperative-sticky", {"a": 6, "b": 4},
          (_Member(A, ("a", "b"), 4, _own("a", 0, 1, 2, 3) + _own("b", 0, 1, 2, 3)),
           _Member(B, ("a",), 4, _own("a", 4, 5)), _Member(C, ("b",)))),
    _Case("general-unsubscribed", "cooperative-sticky", {"a": 4, "b": 4},
          (_Member(A, ("a",), 6, _own("a", 0, 1) + _own("b", 0, 1)), _Member(B, ("a", "b"), 6,
                                                                              _own("a", 2, 3) + _own("b", 2, 3)),
           _Member(E, ("b",)))),
    _Case("general-conflicts", "cooperative-sticky", {"a": 5, "b": 5},
          (_Member(A, ("a", "b"), 5, _own("a", 0, 1, 2) + _own("b", 0)),
           _Member(B, ("a",), 5, _own("a", 2, 3, 4)),
           _Member(C, ("b",), 4, _own("b", 0, 1, 2, 3, 4)),
           _Member(D, ("a", "b"), 3, _own("a", 4) + _own("b", 4)))),
    *_random_general_cases(24),
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
