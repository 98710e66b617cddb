"""The client security options (pure logic): checking, masking, the TLS context's errors, SASL tokens, and the
SCRAM exchange against scramp's RFC 5802 server (end-to-end tests against a broker are in
integration_tests/test_client_security.py)."""

from __future__ import annotations

import argparse
import pickle
import ssl
from pathlib import Path
from typing import Any

import pytest
import scramp
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from metaq.cli.output import command_security
from metaq.client.cluster import broker_endpoint
from metaq.client.sasl import SaslLogin, authenticate, plain_token
from metaq.client.security import SecurityConfig, client_ssl_context
from metaq.client.settings import ConnectionSettings
from metaq.config import MASK, Secret
from metaq.consumer.config import ConsumerConfig
from metaq.errors import (
    AuthenticationError,
    ConfigError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
    for_code,
)
from metaq.producer.config import ProducerConfig
from metaq.spark.options import ReadOptions, WriteOptions
from zk_layout import BrokerInfo

PASSWORD = "hunter2-do-not-show"
KEY_PASSWORD = "key-pass-do-not-show"
SASL = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
        "sasl.password": PASSWORD}


def test_keys_are_librdkafkas_and_values_are_normalised() -> None:
    c = SecurityConfig.from_properties({"security.protocol": "sasl_plaintext", "sasl.mechanism": "scram-sha-256",
                                        "sasl.username": "alice", "sasl.password": PASSWORD,
                                        "ssl.endpoint.identification.algorithm": ""})
    assert (c.security_protocol, c.sasl_mechanism, c.uses_sasl, c.uses_ssl) == (
        "SASL_PLAINTEXT", "SCRAM-SHA-256", True, False)
    assert c.ssl_endpoint_identification_algorithm == "none"
    assert c.sasl_password == Secret(PASSWORD) and c.sasl_password.reveal() == PASSWORD
    assert SecurityConfig().security_protocol == "PLAINTEXT"
    assert SecurityConfig().ssl_endpoint_identification_algorithm == "https"


@pytest.mark.parametrize(("props", "message"), [
    ({"security.protocol": "TLS"}, "'security.protocol': 'TLS' must be one of PLAINTEXT, SSL"),
    ({"sasl.mechanisms": "PLAIN"}, "did you mean 'sasl.mechanism'"),
    ({"security.protocol": "SASL_SSL", "sasl.password": "x"}, "'sasl.username': a value is required with "
                                                               "security.protocol=SASL_SSL"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.username": "a"}, "'sasl.password': a value is required"),
    ({"sasl.username": "a", "sasl.password": "b"}, "'sasl.username' is set but security.protocol is PLAINTEXT"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.username": "a", "sasl.password": "b",
      "ssl.ca.location": "/ca.pem"}, "'ssl.ca.location' is set but security.protocol is SASL_PLAINTEXT"),
    ({"security.protocol": "SSL", "ssl.certificate.location": "/c.pem"}, "'ssl.key.location': a value is "
                                                                          "required with ssl.certificate.location"),
    ({"security.protocol": "SSL", "ssl.key.password": "x"}, "'ssl.key.password': set without ssl.key.location"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI", "sasl.username": "a", "sasl.password": "b"},
     "'sasl.mechanism': 'GSSAPI' must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "dns"}, "must be one of https, none"),
])
def test_contradictions_are_errors_naming_the_option(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SecurityConfig.from_properties(props)


def test_every_client_config_takes_the_keys_and_masks_the_passwords() -> None:
    consumer = ConsumerConfig.from_properties({"group.id": "g", "zookeeper.connect": "z", **SASL})
    producer = ProducerConfig.from_properties({"zookeeper.connect": "z", **SASL})
    for config in (consumer, producer, consumer.security()):
        assert config.security() == SecurityConfig.from_properties(SASL)
        for shown in (repr(config), str(config), f"{config}", f"{config.sasl_password}", str(vars(config))):
            assert PASSWORD not in shown
        assert MASK in repr(config)
    # a spelling mistake in a consumer config is still an error, with the consumer's name in it
    with pytest.raises(ConfigError, match="unknown ConsumerConfig option 'sasl.pasword'; did you mean"):
        ConsumerConfig.from_properties({"group.id": "g", "zookeeper.connect": "z", "sasl.pasword": "x"})
    # and a contradiction too
    with pytest.raises(ConfigError, match="sasl.username' is set but security.protocol is PLAINTEXT"):
        ProducerConfig.from_properties({"sasl.username": "a", "sasl.password": PASSWORD})


def test_secrets_survive_pickling_and_never_show() -> None:
    plaintext_sasl = {**SASL, "security.protocol": "SASL_PLAINTEXT"}
    settings = ConnectionSettings(security=SecurityConfig.from_properties(plaintext_sasl))
    copy = pickle.loads(pickle.dumps(settings))
    assert copy == settings and copy.security.sasl_password is not None
    assert copy.security.sasl_password.reveal() == PASSWORD
    assert PASSWORD not in repr(copy) and PASSWORD not in repr(settings.with_limits(client_id="x"))
    bad = Secret(PASSWORD)
    with pytest.raises(ConfigError) as raised:
        SecurityConfig.from_properties({"security.protocol": "SASL_SSL", "sasl.username": "", "sasl.password": bad})
    assert PASSWORD not in str(raised.value)


def test_spark_options_take_the_keys_and_mask_the_passwords() -> None:
    raw = {"zookeeper.connect": "z", "subscribe": "t", **{k.upper(): v for k, v in SASL.items()}}
    read = ReadOptions.parse({k.lower(): v for k, v in raw.items()}, streaming=False)
    assert read.security == SecurityConfig.from_properties(SASL)
    assert PASSWORD not in repr(read)
    assert pickle.loads(pickle.dumps(read)) == read
    with pytest.raises(ConfigError, match="did you mean 'sasl.password'"):
        ReadOptions.parse({"zookeeper.connect": "z", "subscribe": "t", "sasl.passwd": PASSWORD}, streaming=False)
    write = WriteOptions.parse({"zookeeper.connect": "z", "topic": "t", **SASL, "ssl.key.location": "k",
                                "ssl.certificate.location": "c", "ssl.key.password": KEY_PASSWORD})
    assert PASSWORD not in repr(write) and KEY_PASSWORD not in repr(write)
    producer = ProducerConfig.from_properties({"zookeeper.connect": "z", **write.producer})
    assert producer.sasl_password == Secret(PASSWORD) and producer.ssl_key_password == Secret(KEY_PASSWORD)


def test_command_config_file(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=ops\n"
                    f"sasl.password={PASSWORD}\n")
    security = command_security(argparse.Namespace(command_config=str(path)))
    assert (security.security_protocol, security.sasl_username) == ("SASL_PLAINTEXT", "ops")
    assert command_security(argparse.Namespace(command_config=None)) == SecurityConfig()
    path.write_text("security.protocol=SSL\ngroup.id=etl\n")
    with pytest.raises(ConfigError, match=f"--command-config {path}: unknown SecurityConfig option 'group.id'"):
        command_security(argparse.Namespace(command_config=str(path)))


def test_tls_files_that_cannot_be_used_are_config_errors_naming_the_option(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    with pytest.raises(ConfigError, match=f"'ssl.ca.location': {missing}: no such file"):
        ConnectionSettings(security=SecurityConfig(security_protocol="SSL", ssl_ca_location=str(missing)))
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match="'ssl.ca.location'.*junk.pem"):
        client_ssl_context(SecurityConfig(security_protocol="SSL", ssl_ca_location=str(junk)))
    with pytest.raises(ConfigError, match="'ssl.certificate.location/ssl.key.location'.*junk.pem"):
        client_ssl_context(SecurityConfig(security_protocol="SSL", ssl_certificate_location=str(junk),
                                          ssl_key_location=str(junk)))


def test_tls_context_checks_the_host_name_unless_told_not_to() -> None:
    strict = client_ssl_context(SecurityConfig(security_protocol="SSL"))
    loose = client_ssl_context(SecurityConfig(security_protocol="SSL", ssl_endpoint_identification_algorithm="none"))
    assert (strict.check_hostname, strict.verify_mode) == (True, ssl.CERT_REQUIRED)
    assert (loose.check_hostname, loose.verify_mode) == (False, ssl.CERT_REQUIRED)
    assert strict.minimum_version == ssl.TLSVersion.TLSv1_2


def test_leaders_are_found_at_the_listener_of_the_clients_protocol() -> None:
    info = BrokerInfo(id=1, host="h", port=9092, timestamp_ms=0,
                      endpoints=("PLAINTEXT://h:9092", "INTERNAL://h:9093", "SASL_SSL://h:9094"),
                      security_protocol_map={"PLAINTEXT": "PLAINTEXT", "INTERNAL": "SSL", "SASL_SSL": "SASL_SSL"})
    assert broker_endpoint(info, "PLAINTEXT") == ("h", 9092)
    assert broker_endpoint(info, "SSL") == ("h", 9093)  # a custom listener name mapped to SSL
    assert broker_endpoint(info, "SASL_SSL") == ("h", 9094)
    assert broker_endpoint(info, "SASL_PLAINTEXT") is None
    assert broker_endpoint(None, "PLAINTEXT") is None


def test_sasl_error_codes_are_fatal_authentication_errors() -> None:
    for code in (33, 34, 58):
        cls = for_code(code)
        assert issubclass(cls, AuthenticationError) and not cls.retriable, cls


def test_plain_token_is_rfc_4616() -> None:
    assert plain_token("alice", "pä") == b"\0alice\0p\xc3\xa4"


class _ScramBroker:
    """Just enough of a connection to run the client's exchange against scramp's server: the RFC 5802
    logic on both sides is real, the transport is a method call."""

    address = "scram-test:9092"

    def __init__(self, mechanism: str, enabled: tuple[str, ...], password: str) -> None:
        salt, stored, server_key, iterations = scramp.ScramMechanism(mechanism).make_auth_info(password)
        self.enabled = enabled
        mech = scramp.ScramMechanism(mechanism)
        self.server = mech.make_server(lambda user: (salt, stored, server_key, iterations))
        self.step = 0

    def api_version(self, api_key: int) -> int:
        return 1

    def send(self, request_class: Any, fields: dict[str, Any]) -> Any:
        if request_class is SaslHandshakeRequest:
            code = 0 if fields["mechanism"] in self.enabled else 33
            return argparse.Namespace(error_code=code, mechanisms=list(self.enabled))
        assert request_class is SaslAuthenticateRequest
        token = fields["auth_bytes"].decode()
        self.step += 1
        try:
            if self.step == 1:
                self.server.set_client_first(token)
                return argparse.Namespace(error_code=0, auth_bytes=self.server.get_server_first().encode(),
                                          error_message=None, session_lifetime_ms=0)
            self.server.set_client_final(token)
            return argparse.Namespace(error_code=0, auth_bytes=self.server.get_server_final().encode(),
                                      error_message=None, session_lifetime_ms=0)
        except scramp.ScramException as e:
            return argparse.Namespace(error_code=58, auth_bytes=b"", error_message=f"invalid credentials: {e}",
                                      session_lifetime_ms=0)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_exchange(mechanism: str) -> None:
    authenticate(_ScramBroker(mechanism, (mechanism,), PASSWORD), SaslLogin(mechanism, "alice", Secret(PASSWORD)))
    with pytest.raises(SaslAuthenticationFailedError, match="refused .* authentication as 'alice'") as raised:
        authenticate(_ScramBroker(mechanism, (mechanism,), PASSWORD), SaslLogin(mechanism, "alice", Secret("wrong")))
    assert "wrong" not in str(raised.value) and PASSWORD not in str(raised.value)
    with pytest.raises(UnsupportedSaslMechanismError, match=f"does not enable sasl.mechanism {mechanism}; it "
                                                            f"enables PLAIN"):
        authenticate(_ScramBroker(mechanism, ("PLAIN",), PASSWORD), SaslLogin(mechanism, "alice", Secret(PASSWORD)))
