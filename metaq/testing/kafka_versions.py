"""The Apache Kafka releases the tests run against: each version's Maven artifacts (broker, tools, a log4j binding),
which of them every full run needs, and what each release's configuration can say (docs/testing-apache-kafka.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from metaq.testing.maven import MavenArtifact, PeerUnavailableError, resolve


@dataclass(frozen=True)
class KafkaVersion:
    """One Apache Kafka release: its Maven artifacts (broker, tools, a log4j binding) and what its config needs."""

    version: str
    artifacts: tuple[MavenArtifact, ...]
    required: bool

    @property
    def release(self) -> tuple[int, ...]:
        return tuple(int(part) for part in self.version.split("."))

    @property
    def peer(self) -> str:
        """The column of docs/compatibility.md."""
        return f"Kafka {self.version}"

    @property
    def cache_name(self) -> str:
        return f"apache-kafka-{self.version}"

    @property
    def has_listeners(self) -> bool:
        """``listeners``/``log.dirs`` from 0.9; 0.8 takes ``port``, ``host.name`` and ``log.dir``."""
        return self.release >= (0, 9)

    @property
    def has_create_topics_api(self) -> bool:
        """CreateTopics (and ApiVersions) from 0.10.1; older brokers get topics from TopicCommand --zookeeper."""
        return self.release >= (0, 10, 1)

    def resolve(self) -> Path:
        """The directory of this version's jars (resolved from Maven Central on first use)."""
        return resolve(self.cache_name, self.artifacts)


def _artifacts(*coordinates: str) -> tuple[MavenArtifact, ...]:
    return tuple(MavenArtifact.parse(c) for c in coordinates)


V3_9 = "3.9.2"
V2_8 = "2.8.2"
V1_1 = "1.1.1"
V0_10 = "0.10.2.2"
V0_8 = "0.8.2.2"

CATALOGUE: dict[str, KafkaVersion] = {
    v.version: v for v in (
        # kafka-tools holds most command-line tools from 3.5 on (org.apache.kafka.tools.*)
        KafkaVersion(V3_9, _artifacts(f"org.apache.kafka:kafka_2.13:{V3_9}", f"org.apache.kafka:kafka-tools:{V3_9}",
                                      "org.slf4j:slf4j-reload4j:1.7.36"), required=True),
        KafkaVersion(V2_8, _artifacts(f"org.apache.kafka:kafka_2.13:{V2_8}", "org.slf4j:slf4j-log4j12:1.7.30"),
                     required=True),
        # the last release with the old Scala consumer (kafka.consumer.ZookeeperConsumerConnector)
        KafkaVersion(V1_1, _artifacts(f"org.apache.kafka:kafka_2.11:{V1_1}", "org.slf4j:slf4j-log4j12:1.7.25"),
                     required=True),
        # javax.xml.bind left the JDK in 11; 2.3.x of the Jakarta API still ships the javax.xml.bind package
        KafkaVersion(V0_10, _artifacts(f"org.apache.kafka:kafka_2.11:{V0_10}", "org.slf4j:slf4j-log4j12:1.7.21",
                                       "jakarta.xml.bind:jakarta.xml.bind-api:2.3.3"), required=False),
        KafkaVersion(V0_8, _artifacts(f"org.apache.kafka:kafka_2.11:{V0_8}", "org.slf4j:slf4j-log4j12:1.7.6"),
                     required=False),
    )
}
REQUIRED_VERSIONS: tuple[str, ...] = tuple(v for v, k in CATALOGUE.items() if k.required)
ALL_VERSIONS: tuple[str, ...] = tuple(CATALOGUE)


def catalogue_entry(version: str) -> KafkaVersion:
    """The catalogue entry for ``version``, or for the newest patch of a release line (``"3.9"``)."""
    if version in CATALOGUE:
        return CATALOGUE[version]
    matches = [v for v in CATALOGUE if v.startswith(version + ".")]
    if not matches:
        raise PeerUnavailableError(f"Apache Kafka {version} is not in the catalogue ({', '.join(CATALOGUE)})")
    return CATALOGUE[matches[0]]
