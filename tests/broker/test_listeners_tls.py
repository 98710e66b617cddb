"""Listener parsing, registration as Kafka writes it and TLS settings (with real key files and certificates:
integration_tests/test_tls_key_files.py)."""

from __future__ import annotations

import json

import pytest

from metaq.broker.auth.listeners import Listener, advertised_endpoints, parse_listeners, parse_protocol_map
from metaq.broker.auth.serving import registration_info
from metaq.broker.config import BrokerConfig
from metaq.errors import ConfigError

ZK = {"zookeeper.connect": "127.0.0.1:2181"}


def test_plain_listener_config_is_unchanged() -> None:
    config = BrokerConfig.from_properties({**ZK, "listeners": "PLAINTEXT://127.0.0.1:9092"})
    assert config.listener_list == (Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092),)
    info = registration_info(config, advertised_endpoints(config.listener_list, None, {"PLAINTEXT": 9092}))
    node = json.loads(info.encode())
    assert node["endpoints"] == ["PLAINTEXT://127.0.0.1:9092"]
    assert node["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
    assert (node["host"], node["port"]) == ("127.0.0.1", 9092)


def test_custom_listener_names_and_registration() -> None:
    config = BrokerConfig.from_properties({
        **ZK,
        "listeners": "INTERNAL://:9092,EXTERNAL://0.0.0.0:9093,CLEAR://127.0.0.1:0",
        "advertised.listeners": "INTERNAL://broker0:9092,EXTERNAL://kafka.example.com:443,CLEAR://broker0:9094",
        "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,EXTERNAL:SASL_SSL,CLEAR:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "inter.broker.sasl.username": "broker",
        "inter.broker.sasl.password": "broker-pw",
    })
    assert [(li.name, li.protocol, li.host) for li in config.listener_list] == [
        ("INTERNAL", "SASL_PLAINTEXT", ""), ("EXTERNAL", "SASL_SSL", "0.0.0.0"), ("CLEAR", "PLAINTEXT", "127.0.0.1")]
    info = registration_info(config, advertised_endpoints(config.listener_list, config.advertised_list, {}))
    node = json.loads(info.encode())
    assert node["endpoints"] == ["INTERNAL://broker0:9092", "EXTERNAL://kafka.example.com:443",
                                 "CLEAR://broker0:9094"]
    assert node["listener_security_protocol_map"] == {"INTERNAL": "SASL_PLAINTEXT", "EXTERNAL": "SASL_SSL",
                                                      "CLEAR": "PLAINTEXT"}
    assert (node["host"], node["port"]) == ("broker0", 9094)  # the PLAINTEXT one, as Kafka


def test_no_plaintext_listener_registers_null_host() -> None:
    listeners = parse_listeners("listeners", "SSL://h:1", parse_protocol_map(""))
    info = registration_info(BrokerConfig.from_properties({**ZK, "listeners": "SSL://h:1"}),
                             advertised_endpoints(listeners, None, {}))
    node = json.loads(info.encode())
    assert (node["host"], node["port"]) == (None, -1)


def test_bound_port_is_advertised_for_port_zero() -> None:
    listeners = parse_listeners("listeners", "PLAINTEXT://0.0.0.0:0,SSL://:0", parse_protocol_map(""))
    got = advertised_endpoints(listeners, None, {"PLAINTEXT": 5000, "SSL": 5001})
    assert [a.endpoint() for a in got] == ["PLAINTEXT://127.0.0.1:5000", "SSL://127.0.0.1:5001"]


@pytest.mark.parametrize(("props", "fault"), [
    ({"listeners": "FOO://h:1"}, "listener FOO has no security protocol"),
    ({"listeners": "PLAINTEXT://h:1,PLAINTEXT://h:2"}, "given twice"),
    ({"listeners": "PLAINTEXT://h:1,SSL://h:1"}, "port 1 is used by two"),
    ({"listeners": "nonsense"}, "is not NAME://host:port"),
    ({"listener.security.protocol.map": "A:TLS"}, "listener.security.protocol.map"),
    ({"advertised.listeners": "SSL://h:2"}, "SSL not in 'listeners'"),
    ({"inter.broker.listener.name": "SSL"}, "inter.broker.listener.name"),
    ({"listeners": "SASL_PLAINTEXT://h:1", "sasl.enabled.mechanisms": "PLAIN"}, "sasl.plain.users.file"),
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "unsupported mechanisms"),
    ({"ssl.client.auth": "maybe"}, "ssl.client.auth"),
])
def test_bad_listener_config_names_the_key(props: dict[str, str], fault: str) -> None:
    with pytest.raises(ConfigError, match=fault):
        BrokerConfig.from_properties({**ZK, **props})


INTER_SASL = {"listeners": "SASL_SSL://h:1", "sasl.enabled.mechanisms": "SCRAM-SHA-256"}


@pytest.mark.parametrize(("props", "fault"), [
    ({**INTER_SASL, "inter.broker.sasl.password": "pw"}, "'inter.broker.sasl.username': a value is required: the "
                                                          "inter-broker listener SASL_SSL is SASL_SSL"),
    ({**INTER_SASL, "inter.broker.sasl.username": "b"}, "'inter.broker.sasl.password': a value is required"),
    ({**INTER_SASL, "inter.broker.sasl.username": "b", "inter.broker.sasl.password": "pw"},
     "'sasl.mechanism.inter.broker.protocol': PLAIN is not in 'sasl.enabled.mechanisms'"),
    ({"sasl.mechanism.inter.broker.protocol": "GSSAPI"}, "sasl.mechanism.inter.broker.protocol"),
])
def test_sasl_inter_broker_listener_needs_credentials(props: dict[str, str], fault: str) -> None:
    with pytest.raises(ConfigError, match=fault):
        BrokerConfig.from_properties({**ZK, **props})


def test_inter_broker_security_is_the_listener_protocol_with_the_broker_tls_files() -> None:
    config = BrokerConfig.from_properties({
        **ZK, **INTER_SASL, "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
        "inter.broker.sasl.username": "broker", "inter.broker.sasl.password": "broker-secret",
        "ssl.ca.location": "/ca.pem", "ssl.certificate.location": "/b.pem", "ssl.key.location": "/b.key",
        "ssl.key.password": "key-secret", "ssl.endpoint.identification.algorithm": ""})
    security = config.inter_broker_security()
    assert (security.security_protocol, security.sasl_mechanism, security.sasl_username) == (
        "SASL_SSL", "SCRAM-SHA-256", "broker")
    assert (security.ssl_ca_location, security.ssl_certificate_location, security.ssl_key_location) == (
        "/ca.pem", "/b.pem", "/b.key")
    assert security.ssl_endpoint_identification_algorithm == "none"
    assert security.sasl_password is not None and security.sasl_password.reveal() == "broker-secret"
    assert security.ssl_key_password is not None and security.ssl_key_password.reveal() == "key-secret"
    for text in (repr(config), repr(security), str(config)):
        assert "broker-secret" not in text and "key-secret" not in text
    plain = BrokerConfig.from_properties({**ZK, "listeners": "PLAINTEXT://h:1,SSL://h:2",
                                          "ssl.ca.location": "/ca.pem"}).inter_broker_security()
    assert (plain.security_protocol, plain.ssl_ca_location, plain.sasl_username) == ("PLAINTEXT", None, None)


def test_key_password_never_in_repr() -> None:
    config = BrokerConfig.from_properties({**ZK, "ssl.key.password": "hunter2-secret"})
    assert "hunter2-secret" not in repr(config)
    assert "hunter2-secret" not in repr(config.tls_settings)
    assert config.ssl_key_password is not None and config.ssl_key_password.reveal() == "hunter2-secret"


def test_metadata_keeps_every_listener_of_a_registration() -> None:
    from metaq.broker.metadata import _endpoints
    from zk_layout import BrokerInfo

    ssl_only = BrokerInfo(id=1, host=None, port=-1, endpoints=("SSL://b1:9093", "CLIENT://[::1]:9095"),
                          timestamp_ms=0)
    assert _endpoints(ssl_only) == {"SSL": ("b1", 9093), "CLIENT": ("::1", 9095)}
    legacy = BrokerInfo(id=2, host="b2", port=9092, endpoints=(), timestamp_ms=0, version=1)
    assert _endpoints(legacy) == {"PLAINTEXT": ("b2", 9092)}
    assert _endpoints(BrokerInfo(id=3, host=None, port=-1, endpoints=("junk",), timestamp_ms=0)) == {}
