"""The metaq producer: ``Producer(config).send(topic, value, key)`` with metadata from ZooKeeper."""

from __future__ import annotations

from metaq.producer.accumulator import RecordMetadata, TopicPartition
from metaq.producer.config import ProducerConfig
from metaq.producer.metadata import ClusterMetadata, Leader
from metaq.producer.partitioner import DefaultPartitioner, RandomPartitioner, RoundRobinPartitioner
from metaq.producer.producer import Producer

__all__ = [
    "ClusterMetadata",
    "DefaultPartitioner",
    "Leader",
    "Producer",
    "ProducerConfig",
    "RandomPartitioner",
    "RecordMetadata",
    "RoundRobinPartitioner",
    "TopicPartition",
]
