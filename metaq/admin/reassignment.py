"""``metaq topics reassign``: Kafka's ``kafka-reassign-partitions --zookeeper`` over ZooKeeper, with Kafka's JSON
plan formats (docs/reassignment.md).

* generate: a plan moving every partition of some topics onto a list of brokers, keeping each topic's partition
  count and replication factor (Kafka's rack-unaware assignment, as ``--generate``);
* execute: the plan written to ``/admin/reassign_partitions``, which the controller carries out;
* verify: each partition of the plan completed, still in progress, or not on the plan's replicas;
* cancel: the plan's partitions still moving are written back to their original replicas (what
  AlterPartitionReassignments with null replicas does; Kafka's ZooKeeper tool has no cancel).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence

from kafka.protocol.admin import ElectLeadersRequest

from metaq.broker.replication.reassignment import replica_assignments, with_assignments
from metaq.broker.topics import assign_replicas
from metaq.client.request_codec import build_request
from metaq.client.security import SecurityConfig
from metaq.client.settings import ConnectionSettings
from metaq.errors import BrokerConnectionError, ConfigError, StaleVersionError, UnknownTopicError, for_code
from metaq.json_types import JsonObject
from metaq.protocol.messages import ApiResponse
from zk_layout import ZkLayout, parse_endpoint
from zk_layout.topic_formats import TopicAssignment

TopicPartition = tuple[str, int]
Plan = dict[TopicPartition, tuple[int, ...]]

COMPLETED, IN_PROGRESS, FAILED = "completed", "in progress", "failed"
ANY_LOG_DIR = "any"
PENDING = "There is an existing assignment running (/admin/reassign_partitions exists)."


def parse_plan(text: str) -> Plan:
    """A ``--reassignment-json-file``: ``{"version":1,"partitions":[{"topic","partition","replicas"}]}``."""
    try:
        body = json.loads(text)
        plan: Plan = {}
        for entry in body["partitions"]:
            key = (str(entry["topic"]), int(entry["partition"]))
            if key in plan:
                raise ConfigError(f"the plan names partition {key[0]}-{key[1]} twice")
            plan[key] = tuple(int(b) for b in entry["replicas"])
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ConfigError(f"not a reassignment plan (Kafka's JSON: {{\"version\":1,\"partitions\":[{{\"topic\":"
                          f"...,\"partition\":...,\"replicas\":[...]}}]}}): {e}") from e
    if not plan:
        raise ConfigError("the plan names no partitions")
    return plan


def parse_log_dirs(text: str) -> dict[tuple[str, int, int], str]:
    """A plan's ``log_dirs``: (topic, partition, broker) → directory for each entry other than ``any``; a list
    must be as long as the replicas' (Kafka's ``parsePartitionReassignmentData``)."""
    moves: dict[tuple[str, int, int], str] = {}
    try:
        for entry in json.loads(text)["partitions"]:
            dirs = entry.get("log_dirs")
            if dirs is None:
                continue
            replicas = [int(b) for b in entry["replicas"]]
            if len(dirs) != len(replicas):
                raise ConfigError(f"Size of replicas list {replicas} is different from size of log dirs list {dirs} "
                                  f"for partition {entry['topic']}-{entry['partition']}")
            moves.update({(str(entry["topic"]), int(entry["partition"]), b): str(d)
                          for b, d in zip(replicas, dirs, strict=True) if d != ANY_LOG_DIR})
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ConfigError(f"not a reassignment plan: {e}") from e
    return moves


def format_plan(plan: Mapping[TopicPartition, Sequence[int]]) -> str:
    """Kafka's plan JSON (with ``log_dirs`` ``any``, as Kafka's ``--generate`` prints it)."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r), "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(plan.items())]}, separators=(",", ":"))


def parse_topics_to_move(text: str) -> list[str]:
    """A ``--topics-to-move-json-file``: ``{"topics":[{"topic":"foo"}],"version":1}``."""
    try:
        topics = [str(entry["topic"]) for entry in json.loads(text)["topics"]]
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ConfigError(f"not a topics-to-move file ({{\"topics\":[{{\"topic\":\"...\"}}],\"version\":1}}): "
                          f"{e}") from e
    if not topics:
        raise ConfigError("the topics-to-move file names no topics")
    return topics


def current_assignment(layout: ZkLayout, partitions: Iterable[TopicPartition]) -> Plan:
    """The replicas of each partition now (UnknownTopicError for a partition that does not exist)."""
    result: Plan = {}
    for topic, partition in partitions:
        assignment = _assignment(layout, topic)
        if partition not in assignment.partitions:
            raise UnknownTopicError(f"partition {topic}-{partition} does not exist")
        result[(topic, partition)] = assignment.partitions[partition]
    return result


def generate(layout: ZkLayout, topics: Iterable[str], brokers: Sequence[int]) -> tuple[Plan, Plan]:
    """(current, proposed) for every partition of ``topics`` moved onto ``brokers``."""
    current: Plan = {}
    proposed: Plan = {}
    for topic in topics:
        assignment = _assignment(layout, topic)
        factor = len(next(iter(assignment.partitions.values())))
        placed = assign_replicas(brokers, len(assignment.partitions), factor)
        for partition, replicas in assignment.partitions.items():
            current[(topic, partition)] = replicas
            proposed[(topic, partition)] = tuple(placed[partition])
    return current, proposed


def execute(layout: ZkLayout, plan: Mapping[TopicPartition, tuple[int, ...]],
            before: Callable[[Plan], None] | None = None) -> Plan:
    """Write ``plan`` to ``/admin/reassign_partitions``; returns the current assignment (to keep for a
    rollback). ConfigError if a reassignment request is pending or the plan names an unregistered broker.
    ``before`` is called with the current assignment once the plan is checked, before the request is written
    (``--throttle`` sets its configs there, as Kafka's tool does)."""
    if layout.reassignment_request() is not None:
        raise ConfigError(PENDING)
    for (topic, partition), replicas in plan.items():
        if not replicas or len(set(replicas)) != len(replicas) or min(replicas) < 0:
            raise ConfigError(f"{topic}-{partition}: replicas must be distinct broker ids, got {list(replicas)}")
    current = current_assignment(layout, plan)
    registered = set(layout.broker_ids())
    unknown = sorted({b for replicas in plan.values() for b in replicas} - registered)
    if unknown:
        raise ConfigError(f"The proposed assignment contains non-existent brokerIDs: {','.join(map(str, unknown))}")
    if before is not None:
        before(current)
    if not layout.request_reassignment(plan):
        raise ConfigError(PENDING)
    return current


def verify(layout: ZkLayout, plan: Mapping[TopicPartition, tuple[int, ...]]) -> dict[TopicPartition, str]:
    """Each partition of ``plan``: completed (on its replicas, nothing moving), in progress (requested or
    moving), or failed (neither)."""
    request = layout.reassignment_request()
    pending = request[0] if request is not None else {}
    result: dict[TopicPartition, str] = {}
    for (topic, partition), replicas in sorted(plan.items()):
        assignment = _assignment(layout, topic)
        moving = partition in assignment.adding_replicas or partition in assignment.removing_replicas
        if (topic, partition) in pending or moving:
            result[(topic, partition)] = IN_PROGRESS
        elif assignment.partitions.get(partition) == tuple(replicas):
            result[(topic, partition)] = COMPLETED
        else:
            result[(topic, partition)] = FAILED
    return result


def cancel(layout: ZkLayout, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
    """Put each of ``partitions`` still moving back on its original replicas (a write conditional on the topic
    node's version: the controller's own writes make it retry) and drop them from the pending request.
    Returns the partitions cancelled."""
    wanted = sorted(set(partitions))
    layout.remove_from_reassignment_request(set(wanted))
    cancelled: list[TopicPartition] = []
    for topic in sorted({t for t, _ in wanted}):
        mine = [p for t, p in wanted if t == topic]
        for _ in range(10):
            versioned = layout.topic_assignment_versioned(topic)
            if versioned is None:
                raise UnknownTopicError(f"topic {topic!r} does not exist")
            assignment, version = versioned
            entries = replica_assignments(assignment)
            changed = [p for p in mine if p in entries and entries[p].reassigning]
            if not changed:
                break
            new = with_assignments(assignment, entries | {p: entries[p].cancelled() for p in changed})
            try:
                layout.set_topic_assignment(topic, new, version)
            except StaleVersionError:
                continue
            cancelled += [(topic, p) for p in changed]
            break
    return cancelled


def to_json(plan: Mapping[TopicPartition, Sequence[int]]) -> list[JsonObject]:
    return [{"topic": t, "partition": p, "replicas": list(r)} for (t, p), r in sorted(plan.items())]


def _assignment(layout: ZkLayout, topic: str) -> TopicAssignment:
    assignment = layout.topic_assignment(topic)
    if assignment is None:
        raise UnknownTopicError(f"topic {topic!r} does not exist")
    return assignment


def elect_leaders_unclean(layout: ZkLayout, partitions: Iterable[TopicPartition], *,
                          security: SecurityConfig | None = None, timeout_ms: int = 30000) -> dict[TopicPartition, int]:
    """ElectLeaders (unclean, v1) sent to the controller named in ``/controller``: a partition without a live
    leader gets one from its live replicas, in sync or not (what only the controller can do; Kafka's
    ``kafka-leader-election --election-type unclean``). Returns each partition's error code (0: elected;
    ELECTION_NOT_NEEDED 84: it has a live leader). BrokerConnectionError if the controller cannot be reached."""
    controller = layout.controller()
    info = layout.broker(controller.broker_id) if controller is not None else None
    address = next((a for a in (parse_endpoint(e) for e in (info.endpoints if info else ())) if a is not None), None)
    if address is None:
        raise BrokerConnectionError("no controller with a reachable endpoint is registered (/controller)")
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    settings = ConnectionSettings(client_id="metaq-admin", request_timeout_ms=timeout_ms,
                                  connect_timeout_ms=timeout_ms, security=security or SecurityConfig())
    conn = settings.new_connection(address.host, address.port)
    try:
        conn.connect()
        answer: ApiResponse = conn.send(ElectLeadersRequest, build_request(ElectLeadersRequest, 1, {
            "election_type": 1, "timeout_ms": timeout_ms,
            "topic_partitions": [{"topic": t, "partitions": ps} for t, ps in sorted(by_topic.items())]}))
    finally:
        conn.close()
    if answer.error_code:
        raise for_code(answer.error_code)(f"ElectLeaders refused by the controller (broker {address.host}:"
                                          f"{address.port}): error {answer.error_code}")
    return {(r.topic, p.partition_id): p.error_code for r in answer.replica_election_results
            for p in r.partition_result}
