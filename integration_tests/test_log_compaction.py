"""Log compaction on a real metaq broker process, produced to and read by confluent-kafka (librdkafka), and the
same produce sequence compacted by Apache Kafka 3.9: the surviving key -> (offset, value) set must be the same
(docs/compaction.md). Topics roll every 1 KiB and clean at a dirty ratio of 1%, so cleaning runs in seconds."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from integration_tests.peers import kcat_consume
from metaq.broker.coordinator.offsets_schema import OFFSETS_TOPIC, decode_key
from metaq.broker.log.cleaner.swap import CRASH_ENV
from metaq.broker.process import BrokerProcess, free_port
from metaq.protocol.batches import BATCH_HEADER_SIZE, read_header
from metaq.protocol.records import decode_records
from metaq.testing.apache_kafka import ApacheKafkaBroker
from metaq.testing.broker import BrokerCluster
from metaq.testing.cli import run_cli
from metaq.testing.kafka_versions import V3_9
from metaq.testing.wait import wait_until
from zk_layout import split_connect

Record = tuple[int, bytes | None, bytes | None]  # (offset, key, value)
Entry = tuple[bytes | None, bytes | None]
T = TypeVar("T")

COMPACT = {"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01",
           "delete.retention.ms": "3600000"}
BROKER = {"log.cleaner.backoff.ms": 200, "log.retention.check.interval.ms": 300,
          # 100 map slots (90 usable): the 300-key test needs several passes
          "log.cleaner.dedupe.buffer.size": 2400, "log.segment.delete.delay.ms": 0,
          "transaction.state.log.num.partitions": 2,
          # __consumer_offsets: one partition of 4 KiB segments whose tombstones live 1 s (every other topic of the
          # module sets its own delete.retention.ms)
          "offsets.topic.num.partitions": 1, "offsets.topic.segment.bytes": 4096,
          "log.cleaner.delete.retention.ms": 1000}
TIMEOUT = 60


def _chroot(zk_connect: str, prefix: str) -> str:
    hosts, base = split_connect(zk_connect)
    return f"{hosts}{base}/{prefix}-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def metaq_broker(zk_server, tmp_path_factory) -> Iterator[BrokerProcess]:  # type: ignore[no-untyped-def]
    """One metaq broker for the module, each test on topics of its own (its metrics endpoint for ``topics
    describe``)."""
    broker = BrokerProcess(_chroot(zk_server.connect_string, "metaq-compaction"), 0,
                           tmp_path_factory.mktemp("compaction"),
                           properties={**BROKER, "metrics.port": free_port()}).start()
    try:
        yield broker
    finally:
        broker.stop()


def create(bootstrap: str, topic: str, config: dict[str, str]) -> None:
    """CreateTopics with ``config`` through confluent-kafka's AdminClient."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the answer came
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(30)


def produce(bootstrap: str, topic: str, entries: Sequence[Entry]) -> list[Record]:
    """One record per batch (a flush after each), so both brokers roll at the same offsets; returns what was
    acknowledged."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": False})
    acked: list[Record] = []
    errors: list[str] = []

    def report(err: confluent_kafka.KafkaError | None, msg: confluent_kafka.Message) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked.append((msg.offset(), msg.key(), msg.value()))

    for key, value in entries:
        producer.produce(topic, key=key, value=value, on_delivery=report)
        producer.flush(30)
    assert not errors, errors
    return acked


def consume_all(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[Record]:
    """Every record from the start to the high watermark, as confluent-kafka reads it (the last one must be a
    data record)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                                         "enable.auto.commit": False, "isolation.level": isolation})
    try:
        partition = confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)
        _, high = consumer.get_watermark_offsets(partition, timeout=10)
        consumer.assign([partition])
        out: list[Record] = []
        while not out or out[-1][0] < high - 1:
            msg = consumer.poll(10)
            assert msg is not None, f"no record after {out[-1:] or 'the start'} (high watermark {high})"
            assert msg.error() is None, msg.error()
            out.append((msg.offset(), msg.key(), msg.value()))
        return out
    finally:
        consumer.close()


def high_watermark(bootstrap: str, topic: str) -> int:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return int(consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def low_watermark(bootstrap: str, topic: str) -> int:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return int(consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), timeout=10)[0])
    finally:
        consumer.close()


def active_base(partition_dir: Path) -> int:
    """Base offset of the active segment: the largest ``.log`` file name."""
    return max(int(p.name.split(".")[0]) for p in partition_dir.glob("*.log"))


def compacted(records: Sequence[Record], uncleanable_from: int) -> list[Record]:
    """What a fully cleaned log holds: below the active segment only the latest record of each key (tombstones
    within their delete.retention.ms included), from it on everything."""
    latest: dict[bytes | None, Record] = {}
    for record in records:
        if record[0] < uncleanable_from:
            latest[record[1]] = record
    return sorted(list(latest.values()) + [r for r in records if r[0] >= uncleanable_from])


def metaq_dir(broker: BrokerProcess, topic: str) -> Path:
    return broker.data_dir / f"logs-{broker.broker_id}" / f"{topic}-0"


def history(keys: int, versions: int, tombstones: Sequence[int] = ()) -> list[Entry]:
    entries: list[Entry] = [(f"key-{k}".encode(), f"value-{v}-{k}".encode()) for v in range(versions)
                            for k in range(keys)]
    entries += [(f"key-{k}".encode(), None) for k in tombstones]
    entries += [(f"pad-{i}".encode(), b"x" * 40) for i in range(30)]  # the tail: fills the active segment
    return entries


def wait_compacted(bootstrap: str, topic: str, partition_dir: Path, produced: list[Record]) -> list[Record]:
    """Poll until the broker serves the fully cleaned log; return it."""
    seen: list[list[Record]] = []

    def done() -> bool:
        seen[:] = [consume_all(bootstrap, topic)]
        return seen[0] == compacted(produced, active_base(partition_dir))

    wait_until(done, TIMEOUT, f"{topic} fully cleaned")
    return seen[0]


def test_latest_value_per_key_survives_in_several_passes(metaq_broker: BrokerProcess) -> None:
    topic = "cmp-latest"
    create(metaq_broker.bootstrap, topic, COMPACT)
    produced = produce(metaq_broker.bootstrap, topic, history(keys=300, versions=2))
    result = wait_compacted(metaq_broker.bootstrap, topic, metaq_dir(metaq_broker, topic), produced)
    assert len(result) < len(produced)
    assert "Offset map full" in metaq_broker.log_path.read_text(errors="replace")  # the 2400-byte buffer
    assert (metaq_dir(metaq_broker, topic).parent / "cleaner-offset-checkpoint").read_text().count(topic) == 1
    # kcat (librdkafka) reads the cleaned topic: the same records, so one value per key in the cleaned part
    read_by_kcat = kcat_consume(metaq_broker.bootstrap, topic, 0, "beginning")
    assert [(m.offset, m.key, m.value) for m in read_by_kcat] == result
    cleaned_keys = [m.key for m in read_by_kcat if m.offset < active_base(metaq_dir(metaq_broker, topic))]
    assert len(cleaned_keys) == len(set(cleaned_keys))
    # topics describe: the policy by DescribeConfigs, the dirty ratio from the broker's metrics endpoint
    described = run_cli("topics", "describe", topic, "--bootstrap-server", metaq_broker.bootstrap, "--json",
                        "--metrics-url", f"0=http://127.0.0.1:{metaq_broker.properties['metrics.port']}")
    assert described.returncode == 0, described.stderr
    [shown] = json.loads(described.stdout)["topics"]
    assert shown["cleanup_policy"] == "compact" and 0.0 <= shown["partitions"][0]["dirty_ratio"] < 1.0


def test_tombstones_vanish_after_delete_retention(metaq_broker: BrokerProcess) -> None:
    topic = "cmp-tombstones"
    create(metaq_broker.bootstrap, topic, {**COMPACT, "delete.retention.ms": "1000"})
    produced = produce(metaq_broker.bootstrap, topic, history(keys=10, versions=3, tombstones=range(5)))
    directory = metaq_dir(metaq_broker, topic)

    def gone() -> bool:
        records = consume_all(metaq_broker.bootstrap, topic)
        expected = [r for r in compacted(produced, active_base(directory)) if r[2] is not None]
        return records == expected

    wait_until(gone, TIMEOUT, "tombstones and their keys gone")


def test_keyless_records_are_refused(metaq_broker: BrokerProcess) -> None:
    topic = "cmp-keyless"
    create(metaq_broker.bootstrap, topic, COMPACT)
    producer = confluent_kafka.Producer({"bootstrap.servers": metaq_broker.bootstrap, "retries": 0})
    errors: list[confluent_kafka.KafkaError] = []
    producer.produce(topic, value=b"no key", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(30)
    assert errors and errors[0] is not None and errors[0].code() == confluent_kafka.KafkaError.INVALID_RECORD
    assert produce(metaq_broker.bootstrap, topic, [(b"k", b"v")]) == [(0, b"k", b"v")]


def test_compact_delete_also_applies_retention(metaq_broker: BrokerProcess) -> None:
    both, compact_only = "cmp-retained", "cmp-kept"
    create(metaq_broker.bootstrap, both, {**COMPACT, "cleanup.policy": "compact,delete", "retention.ms": "1000"})
    create(metaq_broker.bootstrap, compact_only, {**COMPACT, "retention.ms": "1000"})
    for topic in (both, compact_only):
        produce(metaq_broker.bootstrap, topic, history(keys=20, versions=1))
    wait_until(lambda: low_watermark(metaq_broker.bootstrap, both) > 0, TIMEOUT, "retention of compact,delete")
    assert low_watermark(metaq_broker.bootstrap, compact_only) == 0  # compact alone: retention.ms has no effect


def on_disk(partition_dir: Path, read: Callable[[list[Path]], T]) -> T:
    """``read`` over the partition's segment files, again whenever the cleaner swapped a listed segment away
    before it was read (a partial view could look like records removed)."""
    while True:
        try:
            return read(sorted(partition_dir.glob("*.log")))
        except FileNotFoundError:
            continue


def markers_on_disk(partition_dir: Path) -> list[int]:
    """Offsets of the control batches in the partition's segment files, read again whenever the cleaner swapped a
    listed segment away before it was read."""
    return on_disk(partition_dir, _markers_in_segments)


def _markers_in_segments(paths: list[Path]) -> list[int]:
    found = []
    for path in paths:
        data, position = path.read_bytes(), 0
        while position + BATCH_HEADER_SIZE <= len(data):
            header = read_header(data[position:position + BATCH_HEADER_SIZE])
            if header.is_control:
                found.append(header.base_offset)
            position += header.size
    return found


def test_transactions_in_a_compacted_topic(metaq_broker: BrokerProcess) -> None:
    """confluent-kafka's transactional producer: an aborted transaction's records are removed and never replace
    an older value of their key, a committed one's are cleaned by key, and the abort marker goes after
    delete.retention.ms once its data is gone (docs/compaction.md, "Transactions")."""
    topic, bootstrap = "cmp-txn", metaq_broker.bootstrap
    create(bootstrap, topic, {**COMPACT, "delete.retention.ms": "0"})
    produce(bootstrap, topic, [(b"k0", b"old-0"), (b"k1", b"old-1")])
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"cmp-{uuid.uuid4().hex}",
                                         "linger.ms": 0})
    producer.init_transactions(30)
    for entries, commit in (([(b"k0", b"aborted"), (b"k2", b"aborted")], False), ([(b"k1", b"new-1")], True)):
        producer.begin_transaction()
        for key, value in entries:
            producer.produce(topic, key=key, value=value)
        producer.flush(30)
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)
    pads = [(f"pad-{i}".encode(), b"x" * 40) for i in range(30)]
    produce(bootstrap, topic, pads)  # rolls segments: the transactions become cleanable
    directory = metaq_dir(metaq_broker, topic)

    def cleaned() -> bool:
        values = {(k, v) for _, k, v in consume_all(bootstrap, topic, "read_uncommitted") if not k.startswith(b"pad")}
        return values == {(b"k0", b"old-0"), (b"k1", b"new-1")}

    wait_until(cleaned, TIMEOUT, "aborted records removed, committed ones cleaned by key")
    committed = [(o, k, v) for o, k, v in consume_all(bootstrap, topic) if not k.startswith(b"pad")]
    assert [(k, v) for _, k, v in committed] == [(b"k0", b"old-0"), (b"k1", b"new-1")]
    commit_marker = committed[-1][0] + 1  # the committed transaction's one record, then its marker
    produce(bootstrap, topic, pads)  # dirties the log again: the next passes give the marker a horizon, then drop it
    wait_until(lambda: markers_on_disk(directory) == [commit_marker], TIMEOUT,
               f"the abort marker removed, the commit marker at {commit_marker} kept")


@pytest.mark.parametrize("step", ["cleaned", "swap", "replace"])
def test_kill_during_a_cleaning_recovers(zk_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                         step: str) -> None:
    """SIGKILL at each step of a segment swap; the restarted broker serves every latest value, and cleans."""
    monkeypatch.setenv(CRASH_ENV, step)
    broker = BrokerProcess(_chroot(zk_server.connect_string, "metaq-compaction-crash"), 0, tmp_path,
                           properties=BROKER).start()
    try:
        topic = "cmp-crash"
        create(broker.bootstrap, topic, {**COMPACT, "cleanup.policy": "delete"})  # no cleaning while producing
        produced = produce(broker.bootstrap, topic, history(keys=30, versions=3))
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # IncrementalAlterConfigs: now compact
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(30)
        assert broker.proc is not None
        wait_until(lambda: broker.proc is not None and broker.proc.poll() is not None, TIMEOUT,
                   f"the broker killing itself at {step}")
        assert broker.proc.returncode == -9
        monkeypatch.delenv(CRASH_ENV)
        broker.start()
        directory = metaq_dir(broker, topic)
        latest = {key: value for _, key, value in produced}
        assert {key: value for _, key, value in consume_all(broker.bootstrap, topic)} == latest
        wait_compacted(broker.bootstrap, topic, directory, produced)
        # the crash's leftovers are gone; a pass still swapping its last segment group in may have its own for a moment
        wait_until(lambda: not [p for p in directory.iterdir() if p.name.endswith((".cleaned", ".swap"))], TIMEOUT,
                   "no .cleaned or .swap file left")
    finally:
        broker.stop()


@pytest.mark.apache_kafka(V3_9)
@pytest.mark.compat("log compaction: same surviving records", f"Kafka {V3_9}")
def test_same_result_as_apache_kafka(metaq_broker: BrokerProcess, apache_kafka) -> None:  # type: ignore[no-untyped-def]
    """The same produce sequence, with overwrites and tombstones, compacted by Kafka 3.9 and by metaq."""
    kafka: ApacheKafkaBroker = apache_kafka(V3_9, properties={"log.cleaner.backoff.ms": 500})
    topic = "cmp-vs-kafka"
    entries = history(keys=25, versions=4, tombstones=[3, 7, 11])
    results = []
    for bootstrap, directory in ((kafka.bootstrap, kafka.dir / "data" / f"{topic}-0"),
                                 (metaq_broker.bootstrap, metaq_dir(metaq_broker, topic))):
        create(bootstrap, topic, COMPACT)
        produced = produce(bootstrap, topic, entries)
        results.append((active_base(directory), wait_compacted(bootstrap, topic, directory, produced)))
    assert results[1] == results[0]


def test_a_follower_replicates_a_cleaned_leader_and_takes_over(zk_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """RF 2: the follower is down while the leader cleans, then fetches the leader's log across the offsets the cleaner
    removed, rejoins the ISR, and serves every latest value once it leads."""
    cluster = BrokerCluster(_chroot(zk_server.connect_string, "metaq-compaction-rf2"), tmp_path)
    try:
        for broker_id in (0, 1):
            cluster.add(broker_id, **BROKER)
        bootstrap = cluster.brokers[0].bootstrap
        topic = "cmp-replicated"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 1, 2, config=COMPACT)])[topic].result(30)

        def isr() -> list[int]:
            return sorted(admin.list_topics(topic, timeout=10).topics[topic].partitions[0].isrs)

        wait_until(lambda: isr() == [0, 1], TIMEOUT, "both replicas in the ISR")
        leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
        follower = cluster.brokers[1 - leader]
        follower.stop()
        wait_until(lambda: isr() == [leader], TIMEOUT, "the stopped follower out of the ISR")
        leader_broker = cluster.brokers[leader]
        produced = produce(leader_broker.bootstrap, topic, history(keys=40, versions=3))
        wait_compacted(leader_broker.bootstrap, topic, metaq_dir(leader_broker, topic), produced)
        follower.start()
        wait_until(lambda: isr() == [0, 1], TIMEOUT, "the follower caught up over the gaps")
        leader_broker.stop()

        def led_by_follower() -> bool:
            return bool(admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader == follower.broker_id)

        wait_until(led_by_follower, TIMEOUT, "the follower leads")
        records = consume_all(follower.bootstrap, topic)
        assert [r[0] for r in records] == sorted({r[0] for r in records})
        latest = {key: (offset, value) for offset, key, value in produced}
        assert {key: (offset, value) for offset, key, value in records} == latest
    finally:
        cluster.stop()


class SteadyKeyedLoad:
    """An idempotent acks=all producer writing versions of 50 keys in a thread until stopped: the value of key k
    carries its version, so the last acknowledged version of each key is known."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        # batch.size (bytes, framing included) under the topic's 1 KiB segment.bytes: a larger produce is refused
        # whole (RECORD_LIST_TOO_LARGE, as Kafka's RecordBatchTooLargeException) and librdkafka does not split it;
        # without it nearly every request was refused and the load was a trickle (docs/compaction.md, "Tests")
        self._producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
                                                   "batch.size": 900, "enable.idempotence": True,
                                                   "message.timeout.ms": 60000})
        self._topic = topic
        self.acked: dict[bytes, int] = {}
        self.errors: list[confluent_kafka.KafkaError] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steady-keyed-load", daemon=True)
        self._thread.start()

    def _report(self, err: confluent_kafka.KafkaError | None, msg: confluent_kafka.Message) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            key = msg.key()
            self.acked[key] = max(self.acked.get(key, -1), int(msg.value().split(b"-")[1]))

    def _run(self) -> None:
        version = 0
        while not self._stop.is_set():
            while len(self._producer) > 1000 and not self._stop.is_set():  # at the brokers' pace: a short backlog
                self._producer.poll(0.01)
            for k in range(50):
                self._producer.produce(self._topic, key=f"key-{k}".encode(), value=f"v-{version}-{k}".encode(),
                                       on_delivery=self._report)
            self._producer.poll(0.02)
            version += 1

    def stop(self) -> dict[bytes, int]:
        self._stop.set()
        self._thread.join(30)
        assert self._producer.flush(90) == 0, "sends still unanswered after the failover"
        too_large = (confluent_kafka.KafkaError.MSG_SIZE_TOO_LARGE, confluent_kafka.KafkaError.RECORD_LIST_TOO_LARGE)
        assert not [e for e in self.errors if e.code() in too_large], self.errors[:3]
        return self.acked


def latest_versions(records: Sequence[Record]) -> dict[bytes, int]:
    latest: dict[bytes, int] = {}
    for _, key, value in records:
        assert key is not None and value is not None
        latest[key] = int(value.split(b"-")[1])
    return latest


def test_leader_killed_while_cleaning_keeps_every_latest_value(zk_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """RF 2, acks=all under a steady keyed load: the leader is SIGKILLed while its cleaner keeps up with the writes,
    the follower (cleaning its own copy) takes over, then the crashed broker recovers its half-cleaned log, catches
    up and leads again. Each replica, when it leads, serves every key's last acknowledged version, at ascending
    offsets."""
    cluster = BrokerCluster(_chroot(zk_server.connect_string, "metaq-compaction-failover"), tmp_path)
    load: SteadyKeyedLoad | None = None
    try:
        for broker_id in (0, 1):
            cluster.add(broker_id, **BROKER)
        admin = AdminClient({"bootstrap.servers": cluster.brokers[0].bootstrap})
        topic = "cmp-failover"
        admin.create_topics([NewTopic(topic, 1, 2, config=COMPACT)])[topic].result(30)

        def partition() -> Any:
            return admin.list_topics(topic, timeout=10).topics[topic].partitions[0]

        wait_until(lambda: sorted(partition().isrs) == [0, 1], TIMEOUT, "both replicas in the ISR")
        first_leader = cluster.brokers[partition().leader]
        other = cluster.brokers[1 - first_leader.broker_id]
        load = SteadyKeyedLoad(",".join(b.bootstrap for b in cluster.brokers), topic)

        def cleaned_some() -> bool:  # offsets missing from what the leader serves: its cleaner removed them
            if high_watermark(first_leader.bootstrap, topic) == 0:  # nothing replicated to both replicas yet
                return False
            offsets = [r[0] for r in consume_all(first_leader.bootstrap, topic, "read_uncommitted")]
            return len(offsets) < offsets[-1] + 1

        wait_until(cleaned_some, TIMEOUT, "the leader's cleaner at work")
        at_kill = dict(load.acked)
        first_leader.kill()
        wait_until(lambda: partition().leader == other.broker_id, TIMEOUT, "the follower leads")
        wait_until(lambda: len(load.acked) == 50 and all(load.acked[k] > v for k, v in at_kill.items()), TIMEOUT,
                   "a newer version of every key acknowledged by the new leader")
        acked = load.stop()
        load = None
        assert latest_versions(consume_all(other.bootstrap, topic)) == acked
        first_leader.start()
        wait_until(lambda: sorted(partition().isrs) == [0, 1], TIMEOUT, "the crashed broker back in the ISR")
        other.stop()
        wait_until(lambda: partition().leader == first_leader.broker_id, TIMEOUT, "the recovered broker leads")
        records = consume_all(first_leader.bootstrap, topic)
        assert [r[0] for r in records] == sorted({r[0] for r in records})
        assert latest_versions(records) == acked
    finally:
        if load is not None:
            load.stop()
        cluster.stop()


def _groups_in_segments(paths: list[Path]) -> list[str]:
    """The group of each record (tombstones included) of ``__consumer_offsets`` segment files."""
    found = []
    for path in paths:
        for _, _, key, _, _ in decode_records(path.read_bytes(), 0).records:
            assert key is not None
            found.append(decode_key(key).group)
    return found


def test_consumer_offsets_are_compacted_and_reload_the_same(metaq_broker: BrokerProcess) -> None:
    """__consumer_offsets is compacted by the cleaner: a group committing 4 partitions 200 times (800 records)
    leaves a partition that shrinks to its latest commits and its active segment, whose offsets a restarted
    broker serves unchanged; after DeleteGroups the tombstones go after delete.retention.ms and no record of the
    group is left (docs/compaction.md, "Internal topics")."""
    bootstrap, topic, group = metaq_broker.bootstrap, "cmp-committed", "cmp-offsets-group"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(30)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "enable.auto.commit": False})
    try:
        for version in range(200):
            consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, p, version * 10 + p) for p in range(4)],
                            asynchronous=False)
    finally:
        consumer.close()
    directory = metaq_dir(metaq_broker, OFFSETS_TOPIC)  # 800 records written: 4 per 340-byte batch
    wait_until(lambda: on_disk(directory, _groups_in_segments).count(group) < 200, TIMEOUT,
               f"{OFFSETS_TOPIC}-0 cleaned to the latest commits and the active 4 KiB segment")

    metaq_broker.stop()
    metaq_broker.start()
    expected = [(p, 1990 + p) for p in range(4)]
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        committed = consumer.committed([confluent_kafka.TopicPartition(topic, p) for p in range(4)], timeout=30)
        assert [(tp.partition, tp.offset) for tp in committed] == expected
    finally:
        consumer.close()

    admin = AdminClient({"bootstrap.servers": metaq_broker.bootstrap})
    admin.delete_consumer_groups([group])[group].result(30)
    other = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "cmp-offsets-other",
                                      "enable.auto.commit": False})
    try:  # the tombstones are cleaned once their segment is no longer the active one
        for version in range(100):
            other.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, version)], asynchronous=False)
    finally:
        other.close()
    wait_until(lambda: group not in on_disk(directory, _groups_in_segments), TIMEOUT,
               f"the tombstones of {group} removed after delete.retention.ms")
