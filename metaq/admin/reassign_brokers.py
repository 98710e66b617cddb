"""``metaq topics reassign --bootstrap-server``: a reassignment through the brokers, as Kafka's
``kafka-reassign-partitions --bootstrap-server`` (``ReassignPartitionsCommand`` 2.8.2/3.9, docs/reassignment.md):

* the current replicas come from Metadata; a plan is refused while ListPartitionReassignments lists anything
  (Kafka's tool without ``--additional``) or names a broker that is not live;
* AlterPartitionReassignments (to the controller) starts or cancels the moves, ListPartitionReassignments says
  which still run;
* a plan's ``log_dirs`` are AlterReplicaLogDirs to the target brokers, repeated until each broker took its
  replica (it answers REPLICA_NOT_AVAILABLE until it hosts one; the directory it was asked for is remembered and
  used when the replica's log is created: Kafka's ``executeMoves`` and ``LogManager.maybeUpdatePreferredLogDir``);
* the throttles are IncrementalAlterConfigs on the topics and on each broker (sent to that broker).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from kafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    AlterReplicaLogDirsRequest,
    IncrementalAlterConfigsRequest,
    ListPartitionReassignmentsRequest,
)
from kafka.protocol.api_message import ApiMessage

from metaq.admin.bootstrap import BootstrapLayout
from metaq.admin.log_dirs import describe_log_dirs
from metaq.admin.reassignment import COMPLETED, FAILED, IN_PROGRESS, Plan, TopicPartition
from metaq.client.cluster import broker_endpoint
from metaq.client.security import SecurityConfig
from metaq.errors import ConfigError, ErrorCode, MetaqError, UnknownTopicError, for_code
from metaq.protocol.messages import ApiResponse, RequestFields

EXISTING = ("Cannot execute because there is an existing partition assignment. (Kafka's tool: --additional, which "
            "metaq does not have)")
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
SET, DELETE = 0, 1
LOG_DIR_WAIT_S = 10.0  # Kafka's --timeout default for starting the log directory moves
TIMEOUT_MS = 30000


class BrokerReassignments:
    """See the module docstring. One Metadata view (``layout``) serves every call."""

    def __init__(self, layout: BootstrapLayout, security: SecurityConfig) -> None:
        self.layout = layout
        self.security = security

    # -- reads --------------------------------------------------------------------------------------

    def current(self, partitions: Iterable[TopicPartition]) -> Plan:
        snapshot = self.layout.refresh()
        result: Plan = {}
        for topic, partition in partitions:
            assignment = snapshot.assignments.get(topic)
            if assignment is None or partition not in assignment.partitions:
                raise UnknownTopicError(f"partition {topic}-{partition} does not exist")
            result[(topic, partition)] = assignment.partitions[partition]
        return result

    def ongoing(self) -> dict[TopicPartition, tuple[int, ...]]:
        """ListPartitionReassignments: each partition moving, with its replicas now."""
        answer = self._send(ListPartitionReassignmentsRequest, {"timeout_ms": TIMEOUT_MS, "topics": None},
                            controller=True)
        if answer.error_code:
            raise for_code(answer.error_code)(f"ListPartitionReassignments: {answer.error_message}")
        return {(t.name, p.partition_index): tuple(p.replicas) for t in answer.topics for p in t.partitions}

    def broker_ids(self) -> list[int]:
        return sorted(self.layout.refresh().brokers)

    # -- the plan -----------------------------------------------------------------------------------

    def execute(self, plan: Mapping[TopicPartition, tuple[int, ...]], before: Callable[[Plan], object] | None = None,
                log_dirs: Mapping[tuple[str, int, int], str] | None = None) -> Plan:
        """Start ``plan`` (``before(current)`` first, as in :func:`metaq.admin.reassignment.execute`); returns the
        current assignment. ConfigError if something moves already or a broker is not live. ``log_dirs`` are
        asked for once before the reassignment starts (a target broker remembers the directory and creates the
        new replica there, instead of creating it elsewhere and moving it as after Kafka's tool, which asks
        only after), then again until every broker took its replica (:meth:`move_log_dirs`)."""
        if self.ongoing():
            raise ConfigError(EXISTING)
        live = set(self.broker_ids())
        unknown = sorted({b for replicas in plan.values() for b in replicas} - live)
        if unknown:
            raise ConfigError(f"Unknown broker id(s) {','.join(map(str, unknown))}")
        current = self.current(plan)
        if before is not None:
            before(current)
        for key, log_dir in sorted((log_dirs or {}).items()):
            self._move_log_dir(*key, log_dir)
        errors = self._alter(plan)
        if errors:
            raise MetaqError("Error reassigning partition(s):\n" + "\n".join(
                f"{t}-{p}: {for_code(code).message}: {message}" for (t, p), (code, message) in sorted(errors.items())))
        if log_dirs:
            self.move_log_dirs(log_dirs)
        return current

    def cancel(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """AlterPartitionReassignments with null replicas; the partitions whose move was cancelled."""
        wanted = sorted(set(partitions))
        errors = self._alter(dict.fromkeys(wanted))
        failed = {k: v for k, v in errors.items() if v[0] != ErrorCode.NO_REASSIGNMENT_IN_PROGRESS}
        if failed:
            raise MetaqError("Error cancelling partition reassignment(s):\n" + "\n".join(
                f"{t}-{p}: {for_code(code).message}" for (t, p), (code, _) in sorted(failed.items())))
        return [k for k in wanted if k not in errors]

    def verify(self, plan: Mapping[TopicPartition, Sequence[int]]) -> dict[TopicPartition, str]:
        moving = self.ongoing()
        current = self.current(plan)
        return {key: IN_PROGRESS if key in moving else COMPLETED if current[key] == tuple(replicas) else FAILED
                for key, replicas in sorted(plan.items())}

    def _alter(self, plan: Mapping[TopicPartition, tuple[int, ...] | None]) -> dict[TopicPartition, tuple[int, str]]:
        by_topic: dict[str, list[dict[str, int | list[int] | None]]] = {}
        for (topic, partition), replicas in sorted(plan.items()):
            by_topic.setdefault(topic, []).append({"partition_index": partition,
                                                   "replicas": list(replicas) if replicas is not None else None})
        answer = self._send(AlterPartitionReassignmentsRequest, {
            "timeout_ms": TIMEOUT_MS, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]},
            controller=True)
        if answer.error_code:
            raise for_code(answer.error_code)(f"AlterPartitionReassignments: {answer.error_message}")
        return {(t.name, p.partition_index): (p.error_code, p.error_message or "") for t in answer.responses
                for p in t.partitions if p.error_code}

    # -- log directories ------------------------------------------------------------------------------

    def move_log_dirs(self, moves: Mapping[tuple[str, int, int], str], wait_s: float = LOG_DIR_WAIT_S) -> None:
        """AlterReplicaLogDirs for each (topic, partition, broker) → directory, again for those a broker does
        not host yet, until all were taken or ``wait_s`` passed (MetaqError naming those left)."""
        pending = dict(moves)
        deadline = time.monotonic() + wait_s
        while pending:
            for key in sorted(pending):
                if self._move_log_dir(*key, pending[key]):
                    del pending[key]
            if pending and time.monotonic() >= deadline:
                raise MetaqError("Timed out before log directory moves could be started for: " + ",".join(
                    f"{t}-{p}-{b}" for t, p, b in sorted(pending)))
            if pending:
                time.sleep(0.1)

    def _move_log_dir(self, topic: str, partition: int, broker_id: int, log_dir: str) -> bool:
        answer = self._send(AlterReplicaLogDirsRequest, {"dirs": [
            {"path": log_dir, "topics": [{"name": topic, "partitions": [partition]}]}]}, broker_id=broker_id)
        codes = [p.error_code for r in answer.results for p in r.partitions]
        if all(c == ErrorCode.NONE for c in codes):
            return True
        if any(c not in (ErrorCode.NONE, ErrorCode.REPLICA_NOT_AVAILABLE) for c in codes):
            code = next(c for c in codes if c not in (ErrorCode.NONE, ErrorCode.REPLICA_NOT_AVAILABLE))
            raise for_code(code)(f"broker {broker_id} refused to place {topic}-{partition} in {log_dir}")
        return False

    def log_dir_status(self, moves: Mapping[tuple[str, int, int], str]) -> dict[tuple[str, int, int], str]:
        """Each replica of ``moves``: completed (its log is in the directory and no future log remains), or in
        progress (Kafka's ``verifyReplicaMoves``)."""
        result: dict[tuple[str, int, int], str] = {}
        for broker_id in sorted({b for _, _, b in moves}):
            described = describe_log_dirs(self.layout, self.security, brokers=[broker_id],
                                          topics=sorted({t for t, _, b in moves if b == broker_id}))
            where = {(r.topic, r.partition, r.is_future): d.path for b in described for d in b.dirs for r in d.replicas}
            for (topic, partition, broker), wanted in moves.items():
                if broker == broker_id:
                    done = where.get((topic, partition, False)) == wanted and (topic, partition, True) not in where
                    result[(topic, partition, broker)] = COMPLETED if done else IN_PROGRESS
        return result

    # -- throttles (metaq.admin.reassign_throttle.ThrottleConfigs) --------------------------------------

    def alter_topic(self, topic: str, changes: Mapping[str, str | None]) -> None:
        self._alter_config(TOPIC_RESOURCE, topic, changes, None)

    def alter_broker(self, broker_id: int, changes: Mapping[str, str | None]) -> None:
        self._alter_config(BROKER_RESOURCE, str(broker_id), changes, broker_id)

    def _alter_config(self, resource_type: int, name: str, changes: Mapping[str, str | None],
                      broker_id: int | None) -> None:
        ops = [{"name": k, "config_operation": SET if v is not None else DELETE, "value": v}
               for k, v in changes.items()]
        answer = self._send(IncrementalAlterConfigsRequest, {
            "resources": [{"resource_type": resource_type, "resource_name": name, "configs": ops}],
            "validate_only": False}, broker_id=broker_id)
        for result in answer.responses:
            if result.error_code:
                raise for_code(result.error_code)(f"altering the config of {name}: {result.error_message}")

    # -- plumbing ---------------------------------------------------------------------------------------

    def _send(self, request_class: type[ApiMessage], fields: RequestFields, *, controller: bool = False,
              broker_id: int | None = None) -> ApiResponse:
        snapshot = self.layout.metadata()
        target = snapshot.controller_id if controller else broker_id
        if target is None:
            target = min(snapshot.brokers)
        info = snapshot.brokers.get(target)
        address = broker_endpoint(info, self.layout.settings.security_protocol) if info is not None else None
        if address is None:
            raise ConfigError(f"broker {target} is not live (live: {sorted(snapshot.brokers)})")
        conn = self.layout.settings.new_connection(*address)
        try:
            conn.connect()
            return conn.send(request_class, fields)
        finally:
            conn.close()
