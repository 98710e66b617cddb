"""Every advertised version of every topic admin API, sent raw: clients only use their highest version, but a
tool pinned to an older one must get a well-formed answer and the same effect in ZooKeeper."""

from __future__ import annotations

import json

from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

from metaq.protocol.apis import BROKER_APIS, ApiKey
from metaq.testing.broker import request, topic_leaders
from metaq.testing.wait import wait_until
from zk_layout import ZkLayout

TOPIC = 2


def _versions(key: ApiKey) -> range:
    _, _, low, high = BROKER_APIS[key]
    return range(low, high + 1)


def _config(zk_layout: ZkLayout, topic: str) -> dict:
    return json.loads(zk_layout.client.get(f"/config/topics/{topic}")[0])["config"]


def test_every_version_of_the_topic_admin_apis(broker, zk_layout: ZkLayout) -> None:
    bootstrap = broker.bootstrap
    topics = []
    for v in _versions(ApiKey.CREATE_TOPICS):
        name = f"cv{v}"
        topics.append(name)
        req = CreateTopicsRequest[v](topics=[CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=1, replication_factor=1, assignments=[],
            configs=[CreateTopicsRequest.CreatableTopic.CreatableTopicConfig(name="retention.ms", value="9000")])],
            timeout_ms=10000, **({"validate_only": False} if v >= 1 else {}))
        [result] = request(bootstrap, req, CreateTopicsResponse, v).topics
        assert (result.name, result.error_code) == (name, 0), (v, result)
        assert _config(zk_layout, name) == {"retention.ms": "9000"}
        if v >= 5:
            assert result.num_partitions == 1 and {c.name: c.value for c in result.configs}["retention.ms"] == "9000"
    wait_until(lambda: all(topic_leaders(bootstrap, t) for t in topics), 30, "the created topics")

    for v in _versions(ApiKey.DESCRIBE_CONFIGS):
        req = DescribeConfigsRequest[v](resources=[DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=TOPIC, resource_name="cv0", configuration_keys=["retention.ms", "segment.bytes"])],
            **({"include_synonyms": True} if v >= 1 else {}))
        [result] = request(bootstrap, req, DescribeConfigsResponse, v).results
        assert result.error_code == 0, (v, result)
        entries = {c.name: c for c in result.configs}
        assert sorted(entries) == ["retention.ms", "segment.bytes"]
        assert entries["retention.ms"].value == "9000"
        if v == 0:
            assert not entries["retention.ms"].is_default and entries["segment.bytes"].is_default
        else:
            assert entries["retention.ms"].config_source == 1  # DYNAMIC_TOPIC_CONFIG
            assert [s.name for s in entries["retention.ms"].synonyms] == ["retention.ms", "log.retention.ms"]

    for v in _versions(ApiKey.ALTER_CONFIGS):
        Resource = AlterConfigsRequest.AlterConfigsResource
        req = AlterConfigsRequest[v](resources=[Resource(resource_type=TOPIC, resource_name="cv1", configs=[
            Resource.AlterableConfig(name="retention.bytes", value=str(1000 + v))])], validate_only=False)
        [result] = request(bootstrap, req, AlterConfigsResponse, v).responses
        assert result.error_code == 0, (v, result)
        assert _config(zk_layout, "cv1") == {"retention.bytes": str(1000 + v)}

    for v in _versions(ApiKey.INCREMENTAL_ALTER_CONFIGS):
        Resource = IncrementalAlterConfigsRequest.AlterConfigsResource
        req = IncrementalAlterConfigsRequest[v](resources=[Resource(resource_type=TOPIC, resource_name="cv2", configs=[
            Resource.AlterableConfig(name="segment.bytes", config_operation=0, value=str(100000 + v))])],
            validate_only=False)
        [result] = request(bootstrap, req, IncrementalAlterConfigsResponse, v).responses
        assert result.error_code == 0, (v, result)
        assert _config(zk_layout, "cv2") == {"retention.ms": "9000", "segment.bytes": str(100000 + v)}

    for v in _versions(ApiKey.CREATE_PARTITIONS):
        req = CreatePartitionsRequest[v](topics=[CreatePartitionsRequest.CreatePartitionsTopic(
            name=f"cv{v}", count=2, assignments=None)], timeout_ms=10000, validate_only=False)
        [result] = request(bootstrap, req, CreatePartitionsResponse, v).results
        assert result.error_code == 0, (v, result)
        assert len(json.loads(zk_layout.client.get(f"/brokers/topics/cv{v}")[0])["partitions"]) == 2

    for v in _versions(ApiKey.DELETE_RECORDS):
        Topic = DeleteRecordsRequest.DeleteRecordsTopic
        req = DeleteRecordsRequest[v](topics=[Topic(name="cv0", partitions=[
            Topic.DeleteRecordsPartition(partition_index=0, offset=-1)])], timeout_ms=10000)
        [result] = request(bootstrap, req, DeleteRecordsResponse, v).topics[0].partitions
        assert (result.error_code, result.low_watermark) == (0, 0), (v, result)

    for v in _versions(ApiKey.DESCRIBE_CLUSTER):
        resp = request(bootstrap, DescribeClusterRequest[v](include_cluster_authorized_operations=False),
                       DescribeClusterResponse, v)
        assert resp.error_code == 0 and [b.broker_id for b in resp.brokers] == [0], (v, resp)
        assert resp.cluster_id == zk_layout.cluster_id()

    for v in _versions(ApiKey.DELETE_TOPICS):
        name = topics[v]
        if v >= 6:
            req = DeleteTopicsRequest[v](topics=[DeleteTopicsRequest.DeleteTopicState(name=name)], timeout_ms=20000)
        else:
            req = DeleteTopicsRequest[v](topic_names=[name], timeout_ms=20000)
        [result] = request(bootstrap, req, DeleteTopicsResponse, v, timeout=30).responses
        assert (result.name, result.error_code) == (name, 0), (v, result)
        assert zk_layout.client.exists(f"/brokers/topics/{name}") is None
        assert zk_layout.client.exists(f"/config/topics/{name}") is None


def test_refusals_name_what_is_wrong_and_change_nothing(broker, zk_layout: ZkLayout) -> None:
    bootstrap = broker.bootstrap

    def create(*topics: CreateTopicsRequest.CreatableTopic) -> list[tuple[int, str | None]]:
        req = CreateTopicsRequest[7](topics=list(topics), timeout_ms=5000, validate_only=False)
        return [(t.error_code, t.error_message) for t in request(bootstrap, req, CreateTopicsResponse, 7).topics]

    def topic(name: str, partitions: int = 1, factor: int = 1, **extra: object) -> CreateTopicsRequest.CreatableTopic:
        return CreateTopicsRequest.CreatableTopic(name=name, num_partitions=partitions, replication_factor=factor,
                                                  **{"assignments": [], "configs": [], **extra})

    Assignment = CreateTopicsRequest.CreatableTopic.CreatableReplicaAssignment
    Config = CreateTopicsRequest.CreatableTopic.CreatableTopicConfig
    code, message = create(topic("bad/name"))[0]
    assert code == 17 and message is not None and "'bad/name'" in message  # INVALID_TOPIC_EXCEPTION
    assert create(topic("dup"), topic("dup"))[0][0] == 42  # INVALID_REQUEST
    assert create(topic("zero", partitions=0))[0][0] == 37  # INVALID_PARTITIONS
    code, message = create(topic("manual", partitions=-1, factor=-1,
                                 assignments=[Assignment(partition_index=0, broker_ids=[7])]))[0]
    assert code == 39 and message is not None and "broker 7 is not a live broker" in message
    code, message = create(topic("conf", configs=[Config(name="retention.hours", value="1")]))[0]
    assert code == 40 and message is not None and "retention.hours" in message  # INVALID_CONFIG
    for name in ("dup", "zero", "manual", "conf"):
        assert zk_layout.client.exists(f"/brokers/topics/{name}") is None

    # an explicit single-replica assignment is accepted
    assert create(topic("manual", partitions=-1, factor=-1,
                        assignments=[Assignment(partition_index=0, broker_ids=[0])]))[0][0] == 0
    wait_until(lambda: topic_leaders(bootstrap, "manual") == {0: 0}, 30, "manual visible")

    req = CreatePartitionsRequest[3](topics=[CreatePartitionsRequest.CreatePartitionsTopic(
        name="manual", count=2, assignments=[
            CreatePartitionsRequest.CreatePartitionsTopic.CreatePartitionsAssignment(broker_ids=[0, 1])])],
        timeout_ms=5000, validate_only=False)
    [result] = request(bootstrap, req, CreatePartitionsResponse, 3).results
    assert result.error_code == 39 and "broker 1 is not a live broker" in result.error_message

    Resource = AlterConfigsRequest.AlterConfigsResource
    req = AlterConfigsRequest[2](resources=[Resource(resource_type=4, resource_name="0", configs=[
        Resource.AlterableConfig(name="log.retention.ms", value="1")])], validate_only=False)
    [result] = request(bootstrap, req, AlterConfigsResponse, 2).responses
    assert result.error_code == 42 and "read-only" in result.error_message

    req = DescribeConfigsRequest[4](resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=TOPIC, resource_name="nope", configuration_keys=None)], include_synonyms=False)
    [result] = request(bootstrap, req, DescribeConfigsResponse, 4).results
    assert result.error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION

    req = DeleteTopicsRequest[4](topic_names=["__consumer_offsets", "nope", "bad/name"], timeout_ms=1000)
    assert [r.error_code for r in request(bootstrap, req, DeleteTopicsResponse, 4).responses] == [42, 3, 17]
    req = DeleteTopicsRequest[6](topics=[DeleteTopicsRequest.DeleteTopicState(name=None)], timeout_ms=1000)
    assert [r.error_code for r in request(bootstrap, req, DeleteTopicsResponse, 6).responses] == [100]
