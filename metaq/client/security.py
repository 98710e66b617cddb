"""The security options of every metaq client, under librdkafka's names::

    security.protocol=SASL_SSL                 # PLAINTEXT (default), SSL, SASL_PLAINTEXT, SASL_SSL
    ssl.ca.location=/etc/metaq/ca.pem          # CAs that sign the brokers' certificates (default: the system's)
    ssl.certificate.location=client.pem        # a client certificate, for brokers with ssl.client.auth
    ssl.key.location=client.key
    ssl.key.password=...                       # if the key file is encrypted
    ssl.endpoint.identification.algorithm=https  # https: the broker's name must match its certificate; none
    sasl.mechanism=SCRAM-SHA-256               # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
    sasl.username=alice
    sasl.password=...

:class:`SecurityConfig` holds them. The consumer's and producer's configs derive from it (so these keys are
theirs too, checked like every other key); the ops tools read them from ``--command-config FILE``; the Spark
source takes them as options. :class:`metaq.client.ConnectionSettings` carries one to every connection.

Passwords are :class:`metaq.config.Secret` values: a config object can be logged or shown in an error.
Settings that contradict each other (a SASL username without a SASL protocol, a key without a certificate)
are ConfigErrors rather than silently ignored, because a forgotten ``security.protocol`` otherwise shows up
later as a confusing connection failure.
"""

from __future__ import annotations

import dataclasses
import functools
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from metaq.config import Config, Properties, Secret, one_of, prop
from metaq.errors import ConfigError

__all__ = ["SASL_MECHANISMS", "SECRET_KEYS", "SECURITY_KEYS", "SECURITY_PROTOCOLS", "SecurityConfig",
           "client_ssl_context", "security_properties"]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
ENDPOINT_IDENTIFICATION = ("https", "none")


@dataclass(frozen=True)
class SecurityConfig(Config):
    """TLS and SASL options of a client (module docstring). Subclassed by the client configs."""

    security_protocol: str = prop("security.protocol", "PLAINTEXT", check=one_of(*SECURITY_PROTOCOLS),
                                  doc="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (any case)")
    ssl_ca_location: str | None = prop("ssl.ca.location", None,
                                       doc="PEM file of the CAs that sign brokers' certificates; unset: the "
                                           "system's trust store")
    ssl_certificate_location: str | None = prop("ssl.certificate.location", None,
                                                doc="PEM client certificate (chain), for ssl.client.auth brokers")
    ssl_key_location: str | None = prop("ssl.key.location", None, doc="PEM private key of the client certificate")
    ssl_key_password: Secret | None = prop("ssl.key.password", None, doc="password of an encrypted key file")
    ssl_endpoint_identification_algorithm: str = prop(
        "ssl.endpoint.identification.algorithm", "https", check=one_of(*ENDPOINT_IDENTIFICATION),
        doc="https: the broker's host name must match its certificate (the default, as in librdkafka 1.9+); "
            "none: any certificate the CAs signed")
    sasl_mechanism: str = prop("sasl.mechanism", "PLAIN", check=one_of(*SASL_MECHANISMS),
                               doc="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
    sasl_username: str | None = prop("sasl.username", None)
    sasl_password: Secret | None = prop("sasl.password", None)

    @property
    def uses_ssl(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def security(self) -> SecurityConfig:
        """Just the security options (of a consumer or producer config), as connections take them."""
        if type(self) is SecurityConfig:
            return self
        return SecurityConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(SecurityConfig)})

    def _check_values(self) -> None:
        object.__setattr__(self, "security_protocol", self.security_protocol.upper())
        object.__setattr__(self, "sasl_mechanism", self.sasl_mechanism.upper())
        if self.ssl_endpoint_identification_algorithm == "":  # Java clients' way of saying none
            object.__setattr__(self, "ssl_endpoint_identification_algorithm", "none")
        super()._check_values()
        self.check_consistent()

    def check_consistent(self) -> None:
        """Raise ConfigError for options that contradict ``security.protocol`` or each other."""
        protocol = self.security_protocol
        if protocol not in SECURITY_PROTOCOLS:  # a SecurityConfig built directly, not from properties
            raise ConfigError(f"config 'security.protocol': {protocol!r} must be one of "
                              f"{', '.join(SECURITY_PROTOCOLS)}")
        if self.uses_sasl:
            for key, value in (("sasl.username", self.sasl_username), ("sasl.password", self.sasl_password)):
                if not value:
                    raise ConfigError(f"config {key!r}: a value is required with security.protocol={protocol}")
        else:
            _refuse_unused(protocol, "SASL_PLAINTEXT or SASL_SSL",
                           {"sasl.username": self.sasl_username, "sasl.password": self.sasl_password})
        if not self.uses_ssl:
            _refuse_unused(protocol, "SSL or SASL_SSL",
                           {"ssl.ca.location": self.ssl_ca_location,
                            "ssl.certificate.location": self.ssl_certificate_location,
                            "ssl.key.location": self.ssl_key_location, "ssl.key.password": self.ssl_key_password})
        if bool(self.ssl_certificate_location) != bool(self.ssl_key_location):
            given, missing = (("ssl.certificate.location", "ssl.key.location") if self.ssl_certificate_location
                              else ("ssl.key.location", "ssl.certificate.location"))
            raise ConfigError(f"config {missing!r}: a value is required with {given}")
        if self.ssl_key_password and not self.ssl_key_location:
            raise ConfigError("config 'ssl.key.password': set without ssl.key.location")


def _refuse_unused(protocol: str, needs: str, values: Mapping[str, object]) -> None:
    for key, value in values.items():
        if value:
            raise ConfigError(f"config {key!r} is set but security.protocol is {protocol}, which does not use "
                              f"it; set security.protocol to {needs}")


SECURITY_KEYS = frozenset(SecurityConfig.keys())
"""The property names of :class:`SecurityConfig`."""

SECRET_KEYS = frozenset({"ssl.key.password", "sasl.password"})
"""The property names whose values are secrets (masked wherever options are shown)."""


def security_properties(values: Properties) -> tuple[SecurityConfig, dict[str, object]]:
    """Split ``values`` into the security options (checked) and the rest."""
    own = {k: v for k, v in values.items() if k in SECURITY_KEYS}
    rest = {k: v for k, v in values.items() if k not in SECURITY_KEYS}
    return SecurityConfig.from_properties(own), rest


@functools.lru_cache(maxsize=32)
def client_ssl_context(security: SecurityConfig) -> ssl.SSLContext:
    """The TLS context of every connection with ``security`` (built once per process; raises ConfigError
    naming the option whose file cannot be used)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED and check_hostname by default
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = security.ssl_endpoint_identification_algorithm == "https"
    if security.ssl_ca_location:
        _load("ssl.ca.location", security.ssl_ca_location,
              lambda: context.load_verify_locations(cafile=security.ssl_ca_location))
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    cert, key = security.ssl_certificate_location, security.ssl_key_location
    if cert and key:
        password = security.ssl_key_password.reveal() if security.ssl_key_password else None
        _load("ssl.certificate.location/ssl.key.location", f"{cert}, {key}",
              lambda: context.load_cert_chain(cert, key, password=password))
    return context


def _load(key: str, path: str, load: Callable[[], None]) -> None:
    try:
        load()
    except FileNotFoundError as e:
        raise ConfigError(f"config {key!r}: {path}: no such file") from e
    except OSError as e:  # ssl.SSLError is an OSError too
        if isinstance(e, ssl.SSLError):
            reason = e.reason or str(e)
            if "BAD_DECRYPT" in reason or "bad decrypt" in str(e):
                reason += " (is ssl.key.password right?)"
            raise ConfigError(f"config {key!r}: {path}: not usable PEM: {reason}") from e
        raise ConfigError(f"config {key!r}: cannot read {path}: {e.strerror or e}") from e
