"""metaq's ZooKeeper-coordinated high-level consumer (Kafka 0.8 ZookeeperConsumerConnector + MetaQ)."""

from metaq.consumer.config import ConsumerConfig
from metaq.consumer.connector import Consumer, ZookeeperConsumerConnector
from metaq.consumer.listener import BatchMessageListener, MessageConsumer, MessageListener
from metaq.consumer.membership import ConsumerState
from metaq.consumer.message import MessageAndMetadata
from metaq.consumer.recover import RecoverStore
from metaq.consumer.streams import KafkaStream
from metaq.consumer.topic_filter import Blacklist, Whitelist
from metaq.errors import ConsumerRebalanceFailedError, ConsumerTimeoutError

__all__ = [
    "BatchMessageListener",
    "Blacklist",
    "Consumer",
    "ConsumerConfig",
    "ConsumerRebalanceFailedError",
    "ConsumerState",
    "ConsumerTimeoutError",
    "KafkaStream",
    "MessageAndMetadata",
    "MessageConsumer",
    "MessageListener",
    "RecoverStore",
    "Whitelist",
    "ZookeeperConsumerConnector",
]
