"""Pure logic of the real-Kafka harness and the compatibility table: per-version broker properties, tool classes,
the outcome recorder and the rendered table (the brokers themselves: integration_tests/test_apache_kafka_harness.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from metaq.testing.apache_kafka import broker_properties, librdkafka_config
from metaq.testing.compat import CompatResult
from metaq.testing.kafka_tools import tool_class
from metaq.testing.kafka_versions import REQUIRED_VERSIONS, V0_8, V1_1, V2_8, V3_9, catalogue_entry
from metaq.testing.maven import PeerUnavailableError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from compat_table import render  # noqa: E402

pytest_plugins = ["pytester"]


def test_required_versions_and_release_lines() -> None:
    assert REQUIRED_VERSIONS == (V3_9, V2_8, V1_1)
    assert catalogue_entry("3.9").version == V3_9 and catalogue_entry("0.8").version == V0_8
    with pytest.raises(PeerUnavailableError, match="not in the catalogue"):
        catalogue_entry("4.0")


def test_properties_follow_each_version(tmp_path: Path) -> None:
    new = broker_properties(V3_9, broker_id=2, port=9000, zk_connect="h:1/c", data_dir=tmp_path,
                            overrides={"log.message.format.version": "0.10.2", "num.partitions": 3})
    assert new["listeners"] == "PLAINTEXT://127.0.0.1:9000" and new["log.dirs"] == str(tmp_path / "data")
    assert (new["broker.id"], new["zookeeper.connect"], new["group.initial.rebalance.delay.ms"]) == ("2", "h:1/c", "0")
    assert (new["log.message.format.version"], new["num.partitions"]) == ("0.10.2", "3")  # the caller's win
    old = broker_properties(V0_8, broker_id=0, port=9001, zk_connect="h:1/c", data_dir=tmp_path)
    assert (old["port"], old["host.name"], old["log.dir"]) == ("9001", "127.0.0.1", str(tmp_path / "data"))
    assert "listeners" not in old and "group.initial.rebalance.delay.ms" not in old
    assert old["offsets.topic.replication.factor"] == "1"


def test_tool_classes_per_version() -> None:
    assert tool_class(V3_9, "kafka-topics") == "org.apache.kafka.tools.TopicCommand"
    assert tool_class(V2_8, "kafka-topics") == "kafka.admin.TopicCommand"
    assert tool_class(V3_9, "kafka-consumer-groups") == "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
    assert tool_class(V1_1, "kafka-export-zk-offsets") == "kafka.tools.ExportZkOffsets"
    with pytest.raises(PeerUnavailableError, match="no kafka-consumer-offset-checker"):
        tool_class(V1_1, "kafka-consumer-offset-checker")
    assert librdkafka_config(V0_8, "b:1")["api.version.request"] is False
    assert librdkafka_config(V1_1, "b:1") == {"bootstrap.servers": "b:1"}


def test_recorder_keeps_the_first_failure_and_skip_reasons(pytester: pytest.Pytester,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeconftest('pytest_plugins = ["metaq.testing.compat"]\n'
                          'def pytest_configure(config):\n'
                          '    config.addinivalue_line("markers", "compat(capability, peer): cell")\n')
    pytester.makepyfile("""
        import pytest

        @pytest.fixture
        def broken_teardown():
            yield
            raise RuntimeError("teardown broke")

        @pytest.mark.compat("produce", "Kafka 3.9.2")
        def test_ok(): pass

        @pytest.mark.compat("produce", "Kafka 1.1.1")
        def test_bad(broken_teardown): assert 1 == 2, "wrong value"

        @pytest.mark.parametrize("v", [pytest.param("x", marks=pytest.mark.compat("consume", "kcat"))])
        def test_skip(v): pytest.skip("kcat missing")

        def test_unmarked(): pass
    """)
    results = pytester.path / "results.json"
    monkeypatch.setenv("METAQ_COMPAT_RESULTS", str(results))
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2, failed=1, skipped=1, errors=1)
    tests = json.loads(results.read_text())["tests"]
    assert {k.split("::")[1]: (v["capability"], v["peer"], v["outcome"]) for k, v in tests.items()} == {
        "test_ok": ("produce", "Kafka 3.9.2", "passed"), "test_bad": ("produce", "Kafka 1.1.1", "failed"),
        "test_skip[x]": ("consume", "kcat", "skipped")}
    assert "wrong value" in tests["test_recorder_keeps_the_first_failure_and_skip_reasons.py::test_bad"]["reason"]
    assert tests["test_recorder_keeps_the_first_failure_and_skip_reasons.py::test_skip[x]"]["reason"] == "kcat missing"


def test_table_orders_peers_and_footnotes_failures() -> None:
    def result(capability: str, peer: str, outcome: str, reason: str = "") -> CompatResult:
        return CompatResult(capability, peer, outcome, reason, "2026-01-01T00:00:00Z")

    table = render({"a": result("produce", "Kafka 1.1.1", "failed", "AssertionError: x | y"),
                    "b": result("produce", "Kafka 3.9.2", "passed"), "c": result("produce", "Kafka 3.9.2", "passed"),
                    "d": result("consume", "kcat", "skipped", "no kcat"), "e": result("produce", "Kafka 0.10.2.2",
                                                                                       "passed")})
    assert "| capability | Kafka 3.9.2 | Kafka 1.1.1 | Kafka 0.10.2.2 | kcat |" in table
    assert "| produce | ✓ | ✗ [2] | ✓ |   |" in table
    assert "| consume |   |   |   | – [1] |" in table
    assert "2. `a` (failed): AssertionError: x \\| y" in table
