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
from metaq.testing.broker import request, topic_leaders, wait_until
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
