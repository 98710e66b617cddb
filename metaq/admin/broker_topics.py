"""Topic changes through the brokers (``metaq topics create|alter|alter-config|delete --bootstrap-server``).

    topics = BrokerTopics(MetadataLayout.connect("broker1:9092", settings))
    topics.create("clicks", 6, replication_factor=2, config={"retention.ms": "86400000"})
    topics.add_partitions("clicks", 12)
    topics.alter_config("clicks", {"segment.bytes": "1048576"}, ["retention.ms"])
    topics.delete(["clicks"], wait_s=30)

What Kafka's ``kafka-topics --bootstrap-server`` and ``kafka-configs --bootstrap-server`` send through its
AdminClient: CreateTopics, CreatePartitions and DeleteTopics to the controller (``KafkaAdminClient`` sends them
to the node Metadata names as controller), IncrementalAlterConfigs (before Kafka 2.3: AlterConfigs with the
whole set of overrides) and DescribeConfigs to any broker. The broker
validates names, counts and config keys (its refusal is raised with its message), so a Kafka broker's own
configs are accepted. The internal topics are refused by :meth:`BrokerTopics.delete` before anything is sent,
as in ZooKeeper mode (zk_layout.check_deletable). Versions: the highest non-flexible one both sides speak.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from kafka.protocol.admin import (
    AlterConfigsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)
from kafka.protocol.api_message import ApiMessage

from metaq.admin.broker_groups import _version
from metaq.client.cluster import broker_endpoint
from metaq.client.connection import BrokerConnection
from metaq.client.metadata import MetadataLayout
from metaq.client.request_codec import build_request
from metaq.errors import BrokerConnectionError, ErrorCode, MetaqError, UnknownTopicError, for_code
from metaq.protocol.apis import ApiKey
from metaq.protocol.messages import ApiResponse, RequestFields
from zk_layout.topics import check_deletable

# the last non-flexible versions (metaq's client encodes no tagged fields)
MAX_CREATE_TOPICS_VERSION = 4
MAX_CREATE_PARTITIONS_VERSION = 1
MAX_DELETE_TOPICS_VERSION = 3
MAX_INCREMENTAL_ALTER_CONFIGS_VERSION = 0
MAX_DESCRIBE_CONFIGS_VERSION = 1
MAX_ALTER_CONFIGS_VERSION = 1
TOPIC_RESOURCE = 2  # ConfigResource.Type.TOPIC
SET, DELETE = 0, 1  # AlterConfigOp.OpType
DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigs' config_source of a topic override
LEADER_WAIT_S = 30.0


def _raise(code: int, message: str | None, what: str) -> None:
    """The broker's refusal as metaq's error for its code, with the broker's own message when it sent one."""
    if code:
        cls = for_code(code)
        raise cls(f"{what}: {message or cls.message} (error {code})")


class BrokerTopics:
    """Topic admin requests over one cluster's brokers; each call opens and closes its connection."""

    def __init__(self, layout: MetadataLayout) -> None:
        self.layout = layout

    # -- requests ------------------------------------------------------------------------------------

    def create(self, topic: str, partitions: int, *, replication_factor: int = 1,
               config: Mapping[str, str] | None = None, timeout_ms: int = 30000) -> dict[int, tuple[int, ...]]:
        """CreateTopics; returns each partition's replicas once every partition has a leader."""
        answer = self._send(CreateTopicsRequest, ApiKey.CREATE_TOPICS, MAX_CREATE_TOPICS_VERSION, {
            "topics": [{"name": topic, "num_partitions": partitions, "replication_factor": replication_factor,
                        "assignments": [], "configs": [{"name": k, "value": v} for k, v in (config or {}).items()]}],
            "timeout_ms": timeout_ms, "validate_only": False}, controller=True)
        for result in answer.topics:
            _raise(result.error_code, getattr(result, "error_message", None), f"creating topic {topic}")
        return self._wait_for_leaders(topic, lambda count: count >= partitions)

    def add_partitions(self, topic: str, count: int, *, timeout_ms: int = 30000) -> dict[int, tuple[int, ...]]:
        """CreatePartitions up to ``count`` (the broker refuses fewer or as many: INVALID_PARTITIONS)."""
        answer = self._send(CreatePartitionsRequest, ApiKey.CREATE_PARTITIONS, MAX_CREATE_PARTITIONS_VERSION, {
            "topics": [{"name": topic, "count": count, "assignments": None}], "timeout_ms": timeout_ms,
            "validate_only": False}, controller=True)
        for result in answer.results:
            _raise(result.error_code, result.error_message, f"adding partitions to topic {topic}")
        return self._wait_for_leaders(topic, lambda have: have >= count)

    def delete(self, topics: Iterable[str], *, wait_s: float = 30.0) -> list[str]:
        """DeleteTopics, waiting up to ``wait_s`` for the brokers; returns the topics still pending (answered
        REQUEST_TIMED_OUT: marked for deletion, a hosting broker has not finished). Internal topics and
        unknown ones are refused before anything is sent."""
        names = list(topics)
        for topic in names:  # all checked before any is deleted, as in ZooKeeper mode
            check_deletable(topic)
        known = self.layout.refresh().assignments
        for topic in names:
            if topic not in known:
                raise UnknownTopicError(f"topic {topic!r} does not exist")
        answer = self._send(DeleteTopicsRequest, ApiKey.DELETE_TOPICS, MAX_DELETE_TOPICS_VERSION, {
            "topic_names": names, "timeout_ms": int(wait_s * 1000)}, controller=True)
        pending = []
        for result in answer.responses:
            if result.error_code == ErrorCode.REQUEST_TIMED_OUT:
                pending.append(result.name)
            else:
                _raise(result.error_code, getattr(result, "error_message", None), f"deleting topic {result.name}")
        return pending

    def alter_config(self, topic: str, updates: Mapping[str, str], removals: Iterable[str] = ()) -> dict[str, str]:
        """IncrementalAlterConfigs (SET ``updates``, DELETE ``removals``); returns the topic's overrides after.
        A broker without it (before Kafka 2.3) gets AlterConfigs with the whole new set of overrides, as
        Kafka's ConfigCommand does for such brokers (AlterConfigs replaces every override of the topic)."""
        removed = list(removals)
        if ApiKey.INCREMENTAL_ALTER_CONFIGS not in self._offered():
            return self._replace_config(topic, updates, removed)
        ops = [{"name": k, "config_operation": SET, "value": v} for k, v in updates.items()]
        ops += [{"name": k, "config_operation": DELETE, "value": None} for k in removed]
        answer = self._send(IncrementalAlterConfigsRequest, ApiKey.INCREMENTAL_ALTER_CONFIGS,
                            MAX_INCREMENTAL_ALTER_CONFIGS_VERSION, {
                                "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": topic,
                                               "configs": ops}], "validate_only": False})
        for result in answer.responses:
            _raise(result.error_code, result.error_message, f"altering the config of topic {topic}")
        return self.overrides(topic)

    def _replace_config(self, topic: str, updates: Mapping[str, str], removals: list[str]) -> dict[str, str]:
        config = {k: v for k, v in self.overrides(topic).items() if k not in removals}
        config.update(updates)
        answer = self._send(AlterConfigsRequest, ApiKey.ALTER_CONFIGS, MAX_ALTER_CONFIGS_VERSION, {
            "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": topic,
                           "configs": [{"name": k, "value": v} for k, v in config.items()]}],
            "validate_only": False})
        for result in answer.responses:
            _raise(result.error_code, result.error_message, f"altering the config of topic {topic}")
        return self.overrides(topic)

    def _offered(self) -> dict[int, tuple[int, int]]:
        """The API versions of a broker of the cluster (the same release everywhere, as in the tests' clusters)."""
        conn = self._connect(controller=False)
        try:
            return dict(conn.broker_versions)
        finally:
            conn.close()

    def config_value(self, topic: str, name: str) -> str | None:
        """DescribeConfigs of one key: the value the broker applies to the topic, override or broker default
        (how ``metaq topics describe`` learns the cleanup policy)."""
        answer = self._send(DescribeConfigsRequest, ApiKey.DESCRIBE_CONFIGS, MAX_DESCRIBE_CONFIGS_VERSION, {
            "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": topic, "configuration_keys": [name]}],
            "include_synonyms": False})
        for result in answer.results:
            _raise(result.error_code, result.error_message, f"describing the config of topic {topic}")
            for entry in result.configs:
                if entry.name == name:
                    return str(entry.value) if entry.value is not None else None
        return None

    def overrides(self, topic: str) -> dict[str, str]:
        """DescribeConfigs: the topic's own overrides (config source DYNAMIC_TOPIC_CONFIG)."""
        answer = self._send(DescribeConfigsRequest, ApiKey.DESCRIBE_CONFIGS, MAX_DESCRIBE_CONFIGS_VERSION, {
            "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": topic, "configuration_keys": None}],
            "include_synonyms": False})
        found: dict[str, str] = {}
        for result in answer.results:
            _raise(result.error_code, result.error_message, f"describing the config of topic {topic}")
            found.update({c.name: c.value for c in result.configs
                          if getattr(c, "config_source", -1) == DYNAMIC_TOPIC_CONFIG and c.value is not None})
        return dict(sorted(found.items()))

    # -- plumbing ------------------------------------------------------------------------------------

    def _wait_for_leaders(self, topic: str, enough: Callable[[int], bool]) -> dict[int, tuple[int, ...]]:
        """The topic's replicas once Metadata shows enough partitions, each with a leader (as kafka-topics, the
        command returns when the topic is usable)."""
        deadline = time.monotonic() + LEADER_WAIT_S
        while True:
            snapshot = self.layout.refresh()
            assignment = snapshot.assignments.get(topic)
            if assignment is not None and enough(len(assignment.partitions)) and all(
                    (s := snapshot.states.get((topic, p))) is not None and s.leader >= 0
                    for p in assignment.partitions):
                return dict(sorted(assignment.partitions.items()))
            if time.monotonic() > deadline:
                raise MetaqError(f"topic {topic}: the brokers did not name a leader for every partition within "
                                 f"{LEADER_WAIT_S:g} s")
            time.sleep(0.1)

    def _send(self, request_class: type[ApiMessage], api_key: int, highest: int, fields: RequestFields, *,
              controller: bool = False) -> ApiResponse:
        conn = self._connect(controller)
        try:
            return conn.send(request_class, build_request(request_class, _version(conn, api_key, highest), fields))
        finally:
            conn.close()

    def _connect(self, controller: bool) -> BrokerConnection:
        snapshot = self.layout.metadata()
        protocol = self.layout.settings.security_protocol
        order = sorted(snapshot.brokers)
        if controller and snapshot.controller_id in snapshot.brokers:
            order = [snapshot.controller_id]
        errors = []
        for broker_id in order:
            address = broker_endpoint(snapshot.brokers[broker_id], protocol)
            if address is None:
                continue
            conn = self.layout.settings.new_connection(*address)
            try:
                conn.connect()
                return conn
            except MetaqError as e:
                conn.close()
                errors.append(f"broker {broker_id}: {e}")
        raise BrokerConnectionError(f"{self.layout.option} {self.layout.bootstrap}: no broker to send the request to "
                                    f"({'; '.join(errors) or 'none known'})")
